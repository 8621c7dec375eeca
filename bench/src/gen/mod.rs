//! Data generators for the Capillaries bigtests: `lookup` (Olist orders and items),
//! `portfolio` (ARK-like accounts, txns, holdings) and `portfolio-clone` (scale a small
//! portfolio data set up by cloning its accounts).
//!
//! Every generator is deterministic for a given seed (same seed, same bytes, on any platform:
//! see `rng`) and streams: rows are written as they are generated, and memory is bounded by
//! one order, one account or one Parquet row group, never by the output size.

mod civil;
mod clone;
mod ingest;
mod lookup;
mod portfolio;
mod rng;
mod sink;

use std::path::PathBuf;

pub use clone::{CloneParams, portfolio_clone};
pub use ingest::{IngestParams, ingest};
pub use lookup::{LookupParams, lookup};
pub use portfolio::{PortfolioParams, portfolio};

/// Output file format of a generator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Comma-separated text with a header line.
    #[default]
    Csv,
    /// Parquet with the column types Capillaries' writer uses.
    Parquet,
}

impl Format {
    /// File name extension (`csv` or `parquet`).
    pub fn extension(self) -> &'static str {
        match self {
            Self::Csv => "csv",
            Self::Parquet => "parquet",
        }
    }
}

/// The `gen` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum GenCmd {
    /// Olist orders and order items for the lookup test.
    Lookup(LookupParams),
    /// ARK-like accounts, txns and holdings for the portfolio test.
    Portfolio(PortfolioParams),
    /// Clone every account of a small portfolio data set C times.
    PortfolioClone(CloneParams),
    /// One large CSV file of order items for the ingest benchmark.
    Ingest(IngestParams),
}

/// Row counts of one generated table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableCount {
    /// File name stem (`olist_orders_dataset`, `txns`, …).
    pub table: &'static str,
    /// Number of files it was split into.
    pub files: usize,
    /// Data rows over all its files.
    pub rows: u64,
}

/// What a generator wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// One entry per table, in the order written.
    pub tables: Vec<TableCount>,
}

impl Summary {
    /// Rows written to `table`, if it was written.
    pub fn rows(&self, table: &str) -> Option<u64> {
        self.tables
            .iter()
            .find(|t| t.table == table)
            .map(|t| t.rows)
    }
}

/// Runs one `gen` subcommand.
pub fn run(cmd: &GenCmd) -> Result<Summary, GenError> {
    match cmd {
        GenCmd::Lookup(p) => lookup(p),
        GenCmd::Portfolio(p) => portfolio(p),
        GenCmd::PortfolioClone(p) => portfolio_clone(p),
        GenCmd::Ingest(p) => ingest(p),
    }
}

/// Why a generator failed.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// The output directory or a file in it could not be created.
    #[error("cannot create {path}")]
    Create {
        /// The directory or file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Writing a file failed.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Listing an input directory failed.
    #[error("cannot read {path}")]
    Read {
        /// The directory or file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The Parquet writer refused the schema or data.
    #[error("parquet error on {path}")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The library error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// Reading or writing a CSV file failed (I/O or malformed input).
    #[error("csv error on {path}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// The library error.
        #[source]
        source: csv::Error,
    },
    /// An input CSV lacks a required column.
    #[error("{path}: no column {column:?} in the header")]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The column name.
        column: &'static str,
    },
    /// An input file set has none of the expected files.
    #[error("{dir}: no {stem}.csv nor {stem}_NNNNN.csv")]
    MissingInput {
        /// The input directory.
        dir: PathBuf,
        /// The expected file name stem.
        stem: &'static str,
    },
    /// Split input files disagree on their header.
    #[error("{path}: header differs from the first {stem} file")]
    HeaderMismatch {
        /// The file with the other header.
        path: PathBuf,
        /// The file name stem.
        stem: &'static str,
    },
    /// An account id is not `<FUND>-<digits>`.
    #[error("{path} record {record}: account id {id:?} is not <FUND>-<digits>")]
    BadAccountId {
        /// The file.
        path: PathBuf,
        /// 1-based data record number.
        record: u64,
        /// The id as read.
        id: String,
    },
    /// An account id appears twice in accounts.csv.
    #[error("{path} record {record}: duplicate account id {id:?}")]
    DuplicateAccount {
        /// The file.
        path: PathBuf,
        /// 1-based data record number.
        record: u64,
        /// The id as read.
        id: String,
    },
    /// A txn or holding refers to an account that is not in accounts.csv.
    #[error("{path} record {record}: account {id:?} is not in accounts.csv")]
    UnknownAccount {
        /// The file.
        path: PathBuf,
        /// 1-based data record number.
        record: u64,
        /// The id as read.
        id: String,
    },
    /// A generator pushed a row that does not fit its table schema (a bug in this crate).
    #[error("{path}: row does not match the schema at column {column}")]
    Schema {
        /// The file.
        path: PathBuf,
        /// 0-based column index.
        column: usize,
    },
    /// A generator went back to an already finished file part (a bug in this crate).
    #[error("{stem}: part {part} requested after part {open} was opened")]
    PartOrder {
        /// The table's file name stem.
        stem: &'static str,
        /// The part requested.
        part: usize,
        /// The part already open.
        open: usize,
    },
}

/// Creates the output directory (and parents).
fn create_dir(dir: &std::path::Path) -> Result<(), GenError> {
    std::fs::create_dir_all(dir).map_err(|source| GenError::Create {
        path: dir.to_path_buf(),
        source,
    })
}
