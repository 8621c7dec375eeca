//! file_table (spec §7.2): the batch's file, read in chunks by the files layer, through the
//! common pipeline; errors name the file and line.

use plexus_core::plan::FileReader;

use super::compile::TableOut;
use super::error::BatchErrorKind;
use super::write::RowWriter;
use super::{BatchRun, BatchStats};

pub(crate) fn run(
    b: &BatchRun<'_>,
    reader: &FileReader,
    _out: &TableOut,
    _w: &mut RowWriter<'_>,
    _stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let url = reader.urls.get(b.task.batch_idx as usize).ok_or_else(|| {
        BatchErrorKind::Internal(format!(
            "batch {} but the reader has {} urls",
            b.task.batch_idx,
            reader.urls.len()
        ))
    })?;
    Err(BatchErrorKind::Input {
        detail: format!("{url}: file input is not available until the files layer is merged"),
        retryable: false,
    })
}
