//! The host's frame decoders, for the fuzz targets and their regression
//! tests only (the `fuzzing` feature; no promise is made for them). Frames
//! are the guest's output: these are the host's first reading of bytes it
//! does not trust.

use crate::Error;
pub use crate::record::frame::DecodeError;
use crate::record::{Record, frame};
use crate::runtime::output;

/// The one record of a one-record frame (an `evaluate` output).
pub fn decode_record(bytes: &[u8]) -> Result<Record, DecodeError> {
    frame::decode_record(bytes)
}

/// The records of an `evaluate-batch` output of `n` inputs, with the errors
/// the guest gave by input index.
pub fn decode_batch_records(
    n: usize,
    bytes: &[u8],
    errors: impl Iterator<Item = (usize, Error)>,
) -> crate::Result<Vec<crate::Result<Record>>> {
    output::decode_batch(n, bytes, errors)
}

/// [`decode_batch_records`], each output rendered as its JSON line, as
/// `stream::run_json` renders it.
pub fn decode_batch_lines(
    n: usize,
    bytes: &[u8],
    errors: impl Iterator<Item = (usize, Error)>,
) -> crate::Result<Vec<crate::Result<String>>> {
    output::decode_batch(n, bytes, errors)
}
