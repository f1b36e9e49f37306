//! Records read into one frame per chunk, on the thread that reads a run's
//! input.
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
//! copy and span pass of the join (the reading thread's `take_frame` and the
//! worker's `frame::join`).
//!
//! What it costs: a record keeps its whole chunk's frame alive (a chunk is at
//! most `stream::MAX_BATCH_BYTES` of input), and a record taken apart into
//! fields, or sent in a batch that is not its whole chunk (records routed by
//! field), is first cut out of the chunk ([`Frame::part`]).
//!
//! How: [`reading`] turns the mode on for the thread; [`from_json_line`]
//! then writes each record into the chunk being filled and gives it a
//! [`Cell`] that [`seal`] fills when the chunk is handed over. The thread
//! seals before it hands a chunk's records to anyone, so a record is never
//! read before its cell is filled.
//!
//! [`from_json_line`]: super::from_json_line

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use omlet_lang::frame::{Part, Writer};

use super::{Bytes, Record};

/// A chunk's frame, once the chunk is sealed.
pub type Cell = OnceLock<Frame>;

/// The frame of a sealed chunk: its records, in the order they were read.
pub struct Frame {
    bytes: Vec<u8>,
    /// Where the nodes and the text start in `bytes`.
    nodes_at: usize,
    text_at: usize,
    /// Each record's nodes and text, as ranges of those sections.
    ranges: Vec<[u32; 4]>,
}

impl Frame {
    /// The frame's bytes, as the guest reads them.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Record `i`, cut out of the frame.
    pub fn part(&self, i: usize) -> Option<Part<'_>> {
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

/// The one record of a one-record frame, as a [`Part`].
pub(super) fn own_part(frame: &[u8]) -> Option<Part<'_>> {
    let word = |at: usize| frame.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if word(0)? != 1 {
        return None;
    }
    let nodes_end = 16usize.checked_add(word(4)? as usize)?;
    Some(Part { size: word(12)?, nodes: frame.get(16..nodes_end)?, text: frame.get(nodes_end..)?, text_from: 0 })
}

/// The chunk a reading thread is filling.
struct Filling {
    writer: Writer,
    ranges: Vec<[u32; 4]>,
    cell: Arc<Cell>,
}

thread_local! {
    /// On a reading thread (see [`reading`]), the chunk being filled.
    static FILLING: RefCell<Option<Filling>> = const { RefCell::new(None) };
}

/// Turns chunk mode on for this thread, for the rest of its life: JSONL
/// records it reads go into chunk frames, and it must [`seal`] each chunk
/// before it hands over its records.
pub(crate) fn reading() {
    FILLING.with(|f| *f.borrow_mut() = Some(Filling { writer: Writer::new(), ranges: Vec::new(), cell: Arc::default() }));
}

/// Ends the chunk being filled: the records read since the last seal can be
/// read from now on. Does nothing on a thread not in chunk mode.
pub(crate) fn seal() {
    FILLING.with(|f| {
        // Never re-entered (nothing reads input while a line is written into
        // the chunk): a borrow that failed would hand over records that can
        // never be read, so it fails the reading thread instead, which the
        // run reports.
        let mut f = f.borrow_mut();
        let Some(f) = f.as_mut() else { return };
        if f.ranges.is_empty() {
            return;
        }
        let records = f.ranges.len();
        let node_bytes = f.writer.node_bytes();
        let bytes = f.writer.take_frame();
        let nodes_at = 12 + 4 * records;
        let frame = Frame { bytes, nodes_at, text_at: nodes_at + node_bytes, ranges: std::mem::take(&mut f.ranges) };
        // The cell is new at each seal: it cannot have been filled.
        let _ = f.cell.set(frame);
        f.cell = Arc::default();
    });
}

/// On a thread in chunk mode, the record that `write` writes into the chunk
/// being filled (`None` from `write` when it could not: a `None` then, and
/// the line is read the usual way). `None` on other threads.
pub(super) fn read_into(write: impl FnOnce(&mut Writer) -> bool) -> Option<Record> {
    FILLING.with(|f| {
        let mut f = f.try_borrow_mut().ok()?;
        let f = f.as_mut()?;
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
    })
}
