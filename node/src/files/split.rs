//! Splitting one large input file into several batches (issue #12, item 1), decided once when
//! the plan is made so that every peer sees the same batches: CSV files into equal byte
//! ranges whose record boundaries the batches find when they run (`cuts.rs`; making the plan
//! reads no input), Parquet files by row-group ranges (read from the footer).

use std::fs::File;
use std::io;

use parquet::file::reader::{FileReader as _, SerializedFileReader};
use plexus_core::plan::{Compression, FilePart, FileReaderFormat, FileSplit, Plan, Reader};

use super::local_path;
use crate::remote::Location;

/// Batches are counted in 16-bit integers by Capillaries (spec §8); a split that would need
/// more is not made.
const MAX_BATCHES: usize = 32_767;

/// How large files are cut into batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitSettings {
    /// Files up to this size stay one batch.
    pub min_file_bytes: u64,
    /// Target bytes per part of a larger file (CSV bytes; Parquet compressed row groups).
    pub part_bytes: u64,
}

impl Default for SplitSettings {
    /// 32 MiB parts of files above 64 MiB: a part is a fraction of a second of work, many
    /// parts per core on a laptop, and few enough that claims and commits stay cheap.
    fn default() -> Self {
        Self::with_part_mib(32)
    }
}

impl SplitSettings {
    /// Parts of `mib` MiB for files above twice that; 0 turns splitting off.
    pub fn with_part_mib(mib: u64) -> Self {
        if mib == 0 {
            return Self::off();
        }
        Self {
            min_file_bytes: 2 * mib * 1024 * 1024,
            part_bytes: mib * 1024 * 1024,
        }
    }

    /// Never split: one batch per URL, as Capillaries does.
    pub fn off() -> Self {
        Self {
            min_file_bytes: u64::MAX,
            part_bytes: u64::MAX,
        }
    }

    /// The default, or `PLEXUS_SPLIT_MIB` (part size in MiB, 0 = off) when it is set to a
    /// number.
    pub fn from_env() -> Self {
        std::env::var("PLEXUS_SPLIT_MIB")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or_else(Self::default, Self::with_part_mib)
    }

    /// Number of parts for a file of `len` bytes (1: not split).
    fn parts_for(&self, len: u64) -> u64 {
        if len <= self.min_file_bytes || self.part_bytes == 0 {
            return 1;
        }
        len.div_ceil(self.part_bytes).max(1)
    }
}

/// Splits the large local input files of every file reader of `plan` into parts, one batch
/// each, and sets the nodes' batch counts; returns how many batches were added. Remote URLs
/// and files that cannot be read stay whole (the batch then reports the problem as before).
pub fn split_inputs(plan: &mut Plan, settings: &SplitSettings) -> usize {
    let mut added = 0;
    for node in &mut plan.nodes {
        let Reader::File(reader) = &mut node.reader else {
            continue;
        };
        let mut splits = Vec::new();
        for (i, url) in reader.urls.iter().enumerate() {
            let parts = split_file(url, &reader.format, settings).unwrap_or_default();
            let url_idx = u32::try_from(i).unwrap_or(u32::MAX);
            if parts.len() <= 1 {
                splits.push(FileSplit {
                    url_idx,
                    part: FilePart::Whole,
                });
            } else {
                splits.extend(parts.into_iter().map(|part| FileSplit { url_idx, part }));
            }
        }
        if splits.len() <= reader.urls.len() || splits.len() > MAX_BATCHES {
            continue;
        }
        added += splits.len() - reader.urls.len();
        node.batches = u32::try_from(splits.len()).unwrap_or(u32::MAX);
        reader.splits = splits;
    }
    added
}

/// The parts of one file; empty or one part means "leave it whole".
fn split_file(
    url: &str,
    format: &FileReaderFormat,
    settings: &SplitSettings,
) -> io::Result<Vec<FilePart>> {
    let local = Location::parse(url).map(|l| l.is_local()).unwrap_or(false);
    if !local {
        return Ok(Vec::new());
    }
    // A compressed file is read from its start: it cannot be cut into byte ranges.
    if let FileReaderFormat::Csv(s) = format
        && s.compression.of_url(url) != Compression::None
    {
        return Ok(Vec::new());
    }
    let path = local_path(url).map_err(io::Error::other)?;
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let parts = settings.parts_for(len);
    if parts <= 1 {
        return Ok(Vec::new());
    }
    match format {
        FileReaderFormat::Csv(_) => Ok(csv_ranges(len, parts)),
        FileReaderFormat::Parquet => parquet_groups(file, settings.part_bytes),
    }
}

/// `parts` equal byte ranges of a CSV file of `len` bytes, moved to record boundaries when
/// their batches run (resynchronising); none when there are more than a plan can hold.
fn csv_ranges(len: u64, parts: u64) -> Vec<FilePart> {
    let Ok(count) = u32::try_from(parts) else {
        return Vec::new();
    };
    if parts as usize > MAX_BATCHES {
        return Vec::new();
    }
    (0..count)
        .map(|index| FilePart::CsvResync {
            index,
            parts: count,
            file_len: len,
        })
        .collect()
}

/// Row-group ranges of about `part_bytes` compressed bytes each.
fn parquet_groups(file: File, part_bytes: u64) -> io::Result<Vec<FilePart>> {
    let reader = SerializedFileReader::new(file).map_err(io::Error::other)?;
    let meta = reader.metadata();
    let mut parts = Vec::new();
    let (mut start, mut bytes, mut rows, mut rows_before) = (0u32, 0u64, 0u64, 0u64);
    let groups = meta.num_row_groups();
    for g in 0..groups {
        let rg = meta.row_group(g);
        bytes += u64::try_from(rg.compressed_size()).unwrap_or(0);
        rows += u64::try_from(rg.num_rows()).unwrap_or(0);
        let end = u32::try_from(g + 1).map_err(io::Error::other)?;
        if bytes >= part_bytes || g + 1 == groups {
            parts.push(FilePart::ParquetGroups {
                start,
                end,
                rows_before,
            });
            start = end;
            rows_before += rows;
            bytes = 0;
            rows = 0;
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_files_and_disabled_settings_stay_whole() {
        let s = SplitSettings::default();
        assert_eq!(s.parts_for(1024), 1);
        assert_eq!(s.parts_for(64 << 20), 1);
        assert_eq!(s.parts_for((64 << 20) + 1), 3);
        assert_eq!(SplitSettings::off().parts_for(u64::MAX - 1), 1);
        assert_eq!(SplitSettings::with_part_mib(0), SplitSettings::off());
    }

    #[test]
    fn csv_ranges_are_numbered_and_bounded() {
        let parts = csv_ranges(100 << 20, 4);
        assert_eq!(parts.len(), 4);
        assert_eq!(
            parts[3],
            FilePart::CsvResync {
                index: 3,
                parts: 4,
                file_len: 100 << 20,
            }
        );
        assert!(csv_ranges(u64::MAX, MAX_BATCHES as u64 + 1).is_empty());
    }
}
