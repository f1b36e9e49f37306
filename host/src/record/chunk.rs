//! Records read into one frame per chunk: [`ChunkWriter`], owned by the
//! reader of a run's input.
//!
//! Why: a JSONL record read on its own goes into a one-record frame of its
//! own, and a batch of them is joined into the frame of a guest call (every
//! node copied again and its text spans moved). `stream::run`'s reading
//! thread already cuts its input into the chunks that become those calls, so
//! there each record is written straight into the frame of its chunk: a
//! batch that is a whole chunk goes to the guest as that frame, with no
//! allocation per record and no join.
//!
//! What it replaces: per record, one allocation of its own frame and the
//! copy and span pass of the join.
//!
//! What it costs: a record keeps its whole chunk's frame alive (a chunk is at
//! most `stream::MAX_BATCH_BYTES` of input), and a record taken apart into
//! fields, or sent in a batch that is not its whole chunk (records routed by
//! field), is first cut out of the chunk ([`Frame::part`]).
//!
//! How: the JSONL reader of a run holds a [`ChunkWriter`] (the run turns it
//! on, `stream::Inputs`); [`ChunkWriter::read_line`] writes each record into
//! the chunk being filled and gives it the chunk's [`Cell`], which
//! [`ChunkWriter::seal`] fills when the run hands the chunk over. A record
//! looked at before that (an input map that retypes its records, say) seals
//! its chunk there and then ([`Cell::get`]), from any thread, and a chunk
//! still open when its writer is dropped is sealed then: every record can
//! always be read. The chunk being filled is behind a mutex for that; only
//! its writer takes it in the normal course.

use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use omlet_lang::frame::{Part, Writer};

use super::{Bytes, Record};

/// The frame a chunk's records are read from: filled when the chunk is
/// sealed.
pub(crate) struct Cell {
    frame: OnceLock<Frame>,
    /// The chunk being filled, to seal it from here when a record is read
    /// before it was.
    filling: Weak<Mutex<Filling>>,
}

impl Cell {
    /// The chunk's frame, sealing the chunk first if it is still being
    /// filled. `None` only for a chunk whose filling is gone without it
    /// being sealed, which [`Filling`]'s `drop` rules out.
    pub(crate) fn get(&self) -> Option<&Frame> {
        if let Some(frame) = self.frame.get() {
            return Some(frame);
        }
        if let Some(filling) = self.filling.upgrade() {
            let mut f = filling.lock().unwrap_or_else(PoisonError::into_inner);
            if std::ptr::eq(Arc::as_ptr(&f.cell), self) {
                f.seal();
            }
        }
        self.frame.get()
    }
}

/// A chunk's frame, once the chunk is sealed.
pub(crate) struct Frame {
    bytes: Vec<u8>,
    /// Where the nodes and the text start in `bytes`.
    nodes_at: usize,
    text_at: usize,
    /// Each record's nodes and text, as ranges of those sections.
    ranges: Vec<[u32; 4]>,
}

impl Frame {
    /// The frame's bytes, as the guest reads them.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// How many records it holds.
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Record `i`, cut out of the frame.
    pub(crate) fn part(&self, i: usize) -> Option<Part<'_>> {
        let [n0, n1, t0, t1] = *self.ranges.get(i)?;
        let size = self.bytes.get(12 + 4 * i..16 + 4 * i)?;
        Some(Part {
            size: u32::from_le_bytes([size[0], size[1], size[2], size[3]]),
            nodes: self.bytes.get(self.nodes_at + n0 as usize..self.nodes_at + n1 as usize)?,
            text: self.bytes.get(self.text_at + t0 as usize..self.text_at + t1 as usize)?,
            text_from: t0,
        })
    }
}

/// The chunk a reading thread is filling.
struct Filling {
    writer: Writer,
    ranges: Vec<[u32; 4]>,
    /// The cell of the records written since the last seal.
    cell: Arc<Cell>,
    /// This filling, for the cells it makes.
    me: Weak<Mutex<Filling>>,
}

impl Filling {
    /// Fills the cell with the records written so far, and starts a new one.
    fn seal(&mut self) {
        if self.ranges.is_empty() {
            return;
        }
        let records = self.ranges.len();
        let node_bytes = self.writer.node_bytes();
        let bytes = self.writer.take_frame();
        let nodes_at = 12 + 4 * records;
        let frame = Frame { bytes, nodes_at, text_at: nodes_at + node_bytes, ranges: std::mem::take(&mut self.ranges) };
        // A cell is filled once, here, and replaced at once.
        let _ = self.cell.frame.set(frame);
        self.cell = Arc::new(Cell { frame: OnceLock::new(), filling: self.me.clone() });
    }
}

impl Drop for Filling {
    /// Records still open when their writer is dropped can be read all the
    /// same.
    fn drop(&mut self) {
        self.seal();
    }
}

/// The chunk a reader is filling: records go into it with
/// [`ChunkWriter::read_line`] until [`ChunkWriter::seal`] hands its frame to
/// the records' [`Cell`].
pub(crate) struct ChunkWriter {
    filling: Arc<Mutex<Filling>>,
}

impl ChunkWriter {
    /// A writer with an empty chunk.
    pub(crate) fn new() -> ChunkWriter {
        let filling = Arc::new_cyclic(|me: &Weak<Mutex<Filling>>| {
            Mutex::new(Filling {
                writer: Writer::new(),
                ranges: Vec::new(),
                cell: Arc::new(Cell { frame: OnceLock::new(), filling: me.clone() }),
                me: me.clone(),
            })
        });
        ChunkWriter { filling }
    }

    /// Reads one JSON object into the chunk being filled, as
    /// [`from_json_line`](super::from_json_line) reads it into a frame of its
    /// own (and as that function does, the usual way when it cannot be
    /// written straight into a frame).
    pub(crate) fn read_line(&mut self, text: &str) -> std::result::Result<Record, super::JsonError> {
        match self.write(|w| super::json::write_line(text, super::json::Read::Any, w)) {
            Some(record) => Ok(record),
            None => super::from_json_line(text),
        }
    }

    /// Ends the chunk being filled: the records read since the last seal are
    /// read from its frame from now on.
    pub(crate) fn seal(&mut self) {
        self.filling.lock().unwrap_or_else(PoisonError::into_inner).seal();
    }

    /// The record that `write` writes into the chunk being filled, or `None`
    /// (and the chunk as it was) when it could not.
    fn write(&mut self, write: impl FnOnce(&mut Writer) -> bool) -> Option<Record> {
        let mut f = self.filling.lock().unwrap_or_else(PoisonError::into_inner);
        let mark = f.writer.mark();
        let (n0, t0) = (f.writer.node_bytes(), f.writer.text_bytes());
        if !write(&mut f.writer) {
            return None;
        }
        let at = |n: usize| u32::try_from(n).ok();
        let place =
            (|| Some((at(f.ranges.len())?, [at(n0)?, at(f.writer.node_bytes())?, at(t0)?, at(f.writer.text_bytes())?])))();
        let Some((index, range)) = place else {
            // Past 4 GiB (a chunk is far smaller): read the usual way.
            f.writer.truncate(mark);
            return None;
        };
        f.ranges.push(range);
        Some(Record { fields: OnceLock::new(), frame: Some(Bytes::Chunk(f.cell.clone(), index)) })
    }
}
