//! Where the bytes of a data file come from and go to: the local file system for paths and
//! `file://`, the process-wide [`FileAccess`] for s3, sftp and http(s) URLs.

use std::fs::File;
use std::io::{self, Read, Seek as _, SeekFrom, Write};
use std::sync::Arc;

use bytes::Bytes;
use parquet::file::reader::{ChunkReader, Length};

use plexus_core::plan::Compression;

use super::local_writer::LocalWriter;
use super::{FileError, local_path};
use crate::remote::{FileAccess, Location, RangedFile, RangedReader, RemoteWrite, redact};

/// The URL as shown in messages: a local path as given, a remote URL without secrets.
pub(crate) fn display(url: &str) -> String {
    match Location::parse(url) {
        Ok(Location::Local(p)) => p,
        _ => redact(url),
    }
}

/// Opens `url` for sequential reading (streamed when remote).
pub(crate) fn open_stream(url: &str) -> Result<Box<dyn Read + Send>, FileError> {
    if Location::parse(url)?.is_local() {
        let path = local_path(url)?;
        let f = File::open(&path).map_err(|source| FileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        return Ok(Box::new(f));
    }
    Ok(FileAccess::global().open_read(url)?)
}

/// Opens `url` for sequential reading of its text: decompressed as `compression` says (for
/// `Auto`, by the URL's suffix), streamed.
pub(crate) fn open_text(
    url: &str,
    compression: Compression,
) -> Result<Box<dyn Read + Send>, FileError> {
    let raw = open_stream(url)?;
    Ok(match compression.of_url(url) {
        Compression::Auto | Compression::None => raw,
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(io::BufReader::new(raw))),
        Compression::Zstd => Box::new(ZstdFrames::new(raw)),
    })
}

/// A Zstandard stream of one or more frames, skippable frames included (`zstd` writes one
/// frame, `pzstd` several with skippable frames between them).
struct ZstdFrames {
    src: io::BufReader<Box<dyn Read + Send>>,
    dec: ruzstd::decoding::FrameDecoder,
    /// Whether a frame's header was read and its blocks are being decoded.
    in_frame: bool,
}

impl ZstdFrames {
    fn new(raw: Box<dyn Read + Send>) -> Self {
        Self {
            src: io::BufReader::new(raw),
            dec: ruzstd::decoding::FrameDecoder::new(),
            in_frame: false,
        }
    }

    /// Reads the next frame's header, skipping skippable frames; false at the end of input.
    fn next_frame(&mut self) -> io::Result<bool> {
        use io::BufRead as _;
        use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
        loop {
            if self.src.fill_buf()?.is_empty() {
                return Ok(false);
            }
            match self.dec.init(&mut self.src) {
                Ok(()) => return Ok(true),
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let skipped = io::copy(
                        &mut (&mut self.src).take(u64::from(length)),
                        &mut io::sink(),
                    )?;
                    if skipped < u64::from(length) {
                        return Err(zstd_err("the input ends inside a skippable frame"));
                    }
                }
                Err(e) => return Err(zstd_err(e)),
            }
        }
    }
}

fn zstd_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {e}"))
}

impl Read for ZstdFrames {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use ruzstd::decoding::BlockDecodingStrategy;
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.in_frame {
                if !self.next_frame()? {
                    return Ok(0);
                }
                self.in_frame = true;
            }
            while self.dec.can_collect() == 0 && !self.dec.is_finished() {
                self.dec
                    .decode_blocks(&mut self.src, BlockDecodingStrategy::UptoBlocks(1))
                    .map_err(zstd_err)?;
            }
            let n = self.dec.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            if self.dec.is_finished() {
                self.in_frame = false;
            }
        }
    }
}

/// Opens bytes `start..end` of the local file `url`, which must still be `file_len` bytes long
/// (the length the splitter cut it at).
pub(crate) fn open_local_part(
    url: &str,
    start: u64,
    end: u64,
    file_len: u64,
) -> Result<Box<dyn Read + Send>, FileError> {
    let path = local_path(url)?;
    let read_err = |source| FileError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut f = File::open(&path).map_err(read_err)?;
    let actual = f.metadata().map_err(read_err)?.len();
    if actual != file_len {
        return Err(FileError::Changed {
            path: path.display().to_string(),
            expected: file_len,
            actual,
        });
    }
    f.seek(SeekFrom::Start(start)).map_err(read_err)?;
    Ok(Box::new(f.take(end.saturating_sub(start))))
}

/// A Parquet input: a local file, or a remote one read by ranges.
pub(crate) enum ParquetInput {
    /// A local file.
    Local(File),
    /// A remote file; footer and column chunks are ranged reads.
    Remote(Arc<RangedFile>),
}

/// Opens `url` for Parquet's ranged reads.
pub(crate) fn open_parquet(url: &str) -> Result<ParquetInput, FileError> {
    if Location::parse(url)?.is_local() {
        let path = local_path(url)?;
        let f = File::open(&path).map_err(|source| FileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        return Ok(ParquetInput::Local(f));
    }
    Ok(ParquetInput::Remote(Arc::new(
        FileAccess::global().open_ranged(url)?,
    )))
}

impl Length for ParquetInput {
    fn len(&self) -> u64 {
        match self {
            Self::Local(f) => f.len(),
            Self::Remote(r) => r.len(),
        }
    }
}

impl ChunkReader for ParquetInput {
    type T = Box<dyn Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        match self {
            Self::Local(f) => {
                let mut f = f.try_clone()?;
                f.seek(SeekFrom::Start(start))?;
                Ok(Box::new(io::BufReader::new(f)))
            }
            Self::Remote(r) => Ok(Box::new(RangedReader::new(r.clone(), start))),
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        match self {
            Self::Local(f) => f.get_bytes(start, length),
            Self::Remote(r) => r
                .read_range(start, length)
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e))),
        }
    }
}

/// An output file: local, or a remote upload, with the bytes written to it so far.
pub(crate) struct OutputFile {
    dest: Destination,
    written: u64,
}

/// Where an output file's bytes go.
enum Destination {
    /// A local file, written by a thread of its own.
    Local(LocalWriter),
    /// A remote upload (S3 multipart, SFTP write).
    Remote(Box<dyn RemoteWrite>),
}

/// Creates (truncates) the output file at `url`.
pub(crate) fn create_output(url: &str) -> Result<OutputFile, FileError> {
    let dest = if Location::parse(url)?.is_local() {
        let path = local_path(url)?;
        let f = File::create(&path).map_err(|source| FileError::Create {
            path: path.display().to_string(),
            source,
        })?;
        Destination::Local(LocalWriter::new(f).map_err(|source| FileError::Create {
            path: path.display().to_string(),
            source,
        })?)
    } else {
        Destination::Remote(FileAccess::global().create(url)?)
    };
    Ok(OutputFile { dest, written: 0 })
}

impl OutputFile {
    /// Makes the written bytes durable (local) or completes the upload (remote); returns the
    /// file's size.
    pub(crate) fn finish(self) -> io::Result<u64> {
        match self.dest {
            Destination::Local(w) => w.finish()?.sync_data()?,
            Destination::Remote(w) => w.finish().map_err(io::Error::other)?,
        }
        Ok(self.written)
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match &mut self.dest {
            Destination::Local(f) => f.write(buf)?,
            Destination::Remote(w) => w.write(buf)?,
        };
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.dest {
            Destination::Local(f) => f.flush(),
            Destination::Remote(w) => w.flush(),
        }
    }
}
