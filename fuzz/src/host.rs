//! Fuzz bodies for the host crate `omlet`: its frame decoder, JSONL/CSV
//! input, JSON records, and the knowdb loader.
//!
//! `frame_host` uses the host's frame decoders through `omlet::fuzzing`
//! (the `fuzzing` feature).

use std::io::{BufRead, BufReader, Cursor};
use std::path::PathBuf;

use omlet::stream::{EmptyCell, Format, ReadLimits, read_with};

/// Target `frame_host`: bytes → the host's frame decoder (`decode_record`
/// for `evaluate` outputs, `decode_batch` for `evaluate-batch` outputs, as
/// records and as JSON lines).
///
/// The first byte gives the batch's shape: the number of inputs (0–15) and
/// which of the first four failed in the guest (so have no record in the
/// frame). The host must accept a one-record frame exactly when the guest's
/// reader does, and give one outcome per input.
pub fn frame_host(data: &[u8]) {
    let Some((&head, frame)) = data.split_first() else { return };
    let host = omlet::fuzzing::decode_record(frame);
    let guest = omlet_lang::frame::Reader::new(frame).and_then(|mut r| {
        if r.records() != 1 {
            return Err("not one record");
        }
        let n = r.size(0)?;
        r.fields(n).map(|_| ())
    });
    assert_eq!(host.is_ok(), guest.is_ok(), "host and guest disagree on a frame: host {host:?}, guest {guest:?}");

    let n = (head & 0x0f) as usize;
    let failed = (0..4usize).filter(|i| head & (0x10 << i) != 0);
    let errors = || failed.clone().map(|i| (i, omlet::Error::Internal(format!("input {i} failed"))));
    let records = omlet::fuzzing::decode_batch_records(n, frame, errors());
    if let Ok(results) = &records {
        assert_eq!(results.len(), n, "a batch must give one outcome per input");
    }
    // The JSON lines of `stream::run_json` come from the same nodes: the same
    // outcomes, each line the record's own JSON.
    let lines = omlet::fuzzing::decode_batch_lines(n, frame, errors());
    match (records, lines) {
        (Ok(records), Ok(lines)) => {
            for (record, line) in records.iter().zip(&lines) {
                match (record, line) {
                    (Ok(record), Ok(line)) => assert_eq!(&record.to_json(), line),
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                    (a, b) => panic!("a record decoded one way and not the other: {a:?} / {b:?}"),
                }
            }
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!("a frame decoded one way and not the other: {:?} / {:?}", a.is_ok(), b.is_ok()),
    }
}

fn consume(input: &[u8], format: Format, limits: &ReadLimits, buffer: usize) {
    let reader: Box<dyn BufRead + Send> = Box::new(BufReader::with_capacity(buffer, Cursor::new(input.to_vec())));
    let (mut number, mut line) = (0u64, 0u64);
    let mut items = read_with(reader, format, limits).into_iter();
    while let Some(item) = items.next() {
        // Reading bytes in memory fails only on a CSV header that cannot
        // be read: one error for the whole input, before any record, and
        // nothing after it.
        let input = match item {
            Ok(input) => input,
            Err(e) => {
                assert!(format == Format::Csv && number == 0, "{format:?}: an error item other than a bad CSV header: {e}");
                assert!(e.to_string().contains("CSV header"), "{e}");
                assert!(items.next().is_none(), "nothing follows a bad CSV header");
                return;
            }
        };
        number += 1;
        assert_eq!(input.number, number, "{format:?}: records must be numbered in order");
        assert!(input.line > line, "{format:?}: record {number} starts on line {} after line {line}", input.line);
        line = input.line;
        if let Ok(record) = &input.record {
            let _ = omlet::record::to_json_string(record);
        }
    }
}

/// Target `jsonl_csv`: bytes → `omlet::stream::read_with` as JSONL and as
/// CSV, with small limits and a small read buffer (so that lines cross
/// buffer refills), every item consumed; then bytes →
/// `omlet::record::from_json_str`, checked against the `serde_json::Value`
/// path (`record::from_json`).
///
/// The first byte chooses the limits and the buffer size; the rest is the
/// input. Records are numbered 1, 2, 3… and start on increasing lines;
/// reading bytes in memory never fails with an I/O error (a CSV header that
/// cannot be read is the input's one error, before any record).
pub fn jsonl_csv(data: &[u8]) {
    let Some((&head, input)) = data.split_first() else { return };
    let limits = ReadLimits {
        max_line_bytes: [8, 64, 300, 4096][(head & 3) as usize],
        csv_max_record_lines: [1, 2, 3, 64][((head >> 2) & 3) as usize],
        csv_empty_cell: if head & 0x40 == 0 { EmptyCell::Absent } else { EmptyCell::Text },
    };
    let buffer = [1, 3, 16, 8192][((head >> 4) & 3) as usize];
    consume(input, Format::Jsonl, &limits, buffer);
    consume(input, Format::Csv, &limits, buffer);

    if let Ok(text) = std::str::from_utf8(input) {
        let direct = omlet::record::from_json_str(text);
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(json) => {
                let via_value = omlet::record::from_json(&json);
                assert_eq!(format!("{direct:?}"), format!("{via_value:?}"), "the two JSON paths disagree");
            }
            Err(_) => assert!(direct.is_err(), "from_json_str read what serde_json refuses"),
        }
        if let Ok(record) = direct {
            let _ = omlet::record::to_json_string(&record);
        }
    }
}

/// A `knowdb.toml` path of this process and thread (tests run in threads).
fn knowdb_path() -> PathBuf {
    thread_local! {
        static PATH: PathBuf = {
            let thread = format!("{:?}", std::thread::current().id()).replace(|c: char| !c.is_ascii_alphanumeric(), "");
            let dir = std::env::temp_dir().join(format!("omlet-fuzz-knowdb-{}-{thread}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("a temporary directory");
            dir.join("knowdb.toml")
        };
    }
    PATH.with(|p| p.clone())
}

/// Target `knowdb`: bytes as a `knowdb.toml` →
/// `omlet::knowledge::knowdb::read` (which takes a path: the input is
/// written to a file first).
pub fn knowdb(data: &[u8]) {
    let path = knowdb_path();
    std::fs::write(&path, data).expect("write the input");
    if let Ok(db) = omlet::knowledge::knowdb::read(&path) {
        for t in &db.tables {
            let _ = format!(
                "{:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                t.name, t.csv, t.types, t.create, t.insert, t.expected_rows, t.on_error
            );
        }
    }
}
