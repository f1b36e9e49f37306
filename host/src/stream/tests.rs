//! The stream's own tests: reading JSONL and CSV, and stopping a pipe.

use std::io::{BufRead, Read};

use super::run::{Chunk, read_ahead};
use super::*;
use crate::Result;

fn all(text: &str, format: Format) -> Vec<Input> {
    let reader: Box<dyn BufRead + Send> = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    read(reader, format).into_iter().map(|i| i.unwrap()).collect()
}

#[test]
fn jsonl_numbers_records_and_skips_blank_lines() {
    let got = all("{\"a\":1}\n\n  \nnot json\n{\"b\":\"x\"}\n", Format::Jsonl);
    let seen: Vec<(u64, u64, bool)> = got.iter().map(|i| (i.number, i.line, i.record.is_ok())).collect();
    assert_eq!(seen, [(1, 1, true), (2, 4, false), (3, 5, true)]);
    assert_eq!(got[1].raw, "not json");
    assert!(got[1].record.as_ref().unwrap_err().to_string().starts_with("line 4: invalid JSON"));
}

#[test]
fn csv_rows_become_chars_records_and_bad_rows_errors() {
    let got = all("ip,status\n10.0.0.1,200\n\"10.0.0.2\",\"a,b\"\n10.0.0.3\n", Format::Csv);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].record.as_ref().unwrap().to_json(), r#"{"ip":"10.0.0.1","status":"200"}"#);
    assert_eq!(got[1].record.as_ref().unwrap().to_json(), r#"{"ip":"10.0.0.2","status":"a,b"}"#);
    assert_eq!((got[2].number, got[2].line), (3, 4));
    assert_eq!(got[2].record.as_ref().unwrap_err().to_string(), "line 4: 1 values for 2 columns");
}

#[test]
fn empty_csv_cells_are_absent_unless_asked_for_as_text() {
    let text = "a,b,c\nx,,z\n";
    let got = all(text, Format::Csv);
    assert_eq!(got[0].record.as_ref().unwrap().to_json(), r#"{"a":"x","c":"z"}"#);
    let limits = ReadLimits { csv_empty_cell: EmptyCell::Text, ..Default::default() };
    let got: Vec<Input> = read_with(Box::new(std::io::Cursor::new(text.as_bytes().to_vec())), Format::Csv, &limits)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got[0].record.as_ref().unwrap().to_json(), r#"{"a":"x","b":"","c":"z"}"#);
}

fn csv(text: &str) -> Vec<Input> {
    all(text, Format::Csv)
}

fn json_of(i: &Input) -> String {
    match &i.record {
        Ok(r) => r.to_json(),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn a_quote_inside_an_unquoted_csv_field_is_a_character() {
    // Two stray quotes used to join the rows between them into one text,
    // of which only the first record was kept.
    let got = csv("id,name\n1,5\" screen\n2,keyboard\n3,mouse\n4,10\" panel\n5,cable\n");
    let seen: Vec<String> = got.iter().map(json_of).collect();
    assert_eq!(
        seen,
        [
            r#"{"id":"1","name":"5\" screen"}"#,
            r#"{"id":"2","name":"keyboard"}"#,
            r#"{"id":"3","name":"mouse"}"#,
            r#"{"id":"4","name":"10\" panel"}"#,
            r#"{"id":"5","name":"cable"}"#,
        ]
    );
    assert_eq!(got.iter().map(|i| i.line).collect::<Vec<_>>(), [2, 3, 4, 5, 6]);
}

#[test]
fn a_quoted_csv_field_may_span_lines_and_hold_quotes_and_crs() {
    let got = csv("id,note\n1,\"two\nlines\"\n2,\"say \"\"hi\"\"\"\n3,\"a\rb\"\n");
    let seen: Vec<String> = got.iter().map(json_of).collect();
    assert_eq!(seen, [r#"{"id":"1","note":"two\nlines"}"#, r#"{"id":"2","note":"say \"hi\""}"#, r#"{"id":"3","note":"a\rb"}"#]);
    assert_eq!(got.iter().map(|i| (i.number, i.line)).collect::<Vec<_>>(), [(1, 2), (2, 4), (3, 5)]);
}

#[test]
fn a_bare_cr_ends_a_csv_record() {
    // Old Mac line ends: the whole file is one line.
    let got = csv("id,name\r1,a\r2,b\r");
    assert_eq!(got.iter().map(json_of).collect::<Vec<_>>(), [r#"{"id":"1","name":"a"}"#, r#"{"id":"2","name":"b"}"#]);
    // A bare CR inside a line: two records, none lost.
    let got = csv("id,name\n1,a\r2,b\n3,c\n");
    assert_eq!(
        got.iter().map(json_of).collect::<Vec<_>>(),
        [r#"{"id":"1","name":"a"}"#, r#"{"id":"2","name":"b"}"#, r#"{"id":"3","name":"c"}"#]
    );
    assert_eq!(got.iter().map(|i| i.number).collect::<Vec<_>>(), [1, 2, 3]);
}

#[test]
fn an_open_quote_is_one_error_and_the_rows_after_it_are_read() {
    let got = csv("id,name\n1,\"open\n2,b\n3,c\n");
    assert_eq!(got.len(), 3);
    assert!(json_of(&got[0]).contains("unbalanced quote"), "{}", json_of(&got[0]));
    assert_eq!(json_of(&got[1]), r#"{"id":"2","name":"b"}"#);
    assert_eq!(json_of(&got[2]), r#"{"id":"3","name":"c"}"#);
}

#[test]
fn a_repeated_csv_column_keeps_its_first_place_and_last_value_as_json_does() {
    let got = csv("a,b,a\n1,2,3\n");
    assert_eq!(json_of(&got[0]), r#"{"a":"3","b":"2"}"#);
    let json = all("{\"a\":\"1\",\"b\":\"2\",\"a\":\"3\"}\n", Format::Jsonl);
    assert_eq!(json_of(&json[0]), json_of(&got[0]));
}

#[test]
fn a_csv_header_that_cannot_be_read_ends_the_input_with_one_error() {
    let reader: Box<dyn BufRead + Send> = Box::new(std::io::Cursor::new(b"id,\"name\n1,a\n2,b\n".to_vec()));
    let items: Vec<Result<Input>> = read(reader, Format::Csv).into_iter().collect();
    assert_eq!(items.len(), 1, "one error, not one per row");
    let e = items[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("the CSV header cannot be read"), "{e}");
}

#[test]
fn a_byte_order_mark_is_not_part_of_the_first_record() {
    let got = all("\u{feff}{\"a\":1}\n", Format::Jsonl);
    assert_eq!(json_of(&got[0]), r#"{"a":1}"#);
    let got = csv("\u{feff}id,name\n1,a\n");
    assert_eq!(json_of(&got[0]), r#"{"id":"1","name":"a"}"#);
}

#[test]
fn lines_of_other_white_space_are_records_not_blank_lines() {
    let got = all("{\"a\":1}\n\u{a0}\n\u{c}\n \t\n", Format::Jsonl);
    assert_eq!(got.len(), 3, "NBSP and form-feed lines get error lines; spaces and tabs are blank");
    assert!(got[1].record.is_err() && got[2].record.is_err());
    let got = csv("id,name\n\u{a0}\n1,a\n");
    assert_eq!(got.len(), 2);
    assert!(got[0].record.is_err());
}

/// A source that gives its bytes, then stalls until told to go on.
struct Stalling {
    first: Option<Vec<u8>>,
    go: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl Read for Stalling {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let bytes = match self.first.take() {
            Some(b) => b,
            None => match self.go.recv() {
                Ok(b) => b,
                Err(_) => return Ok(0),
            },
        };
        out[..bytes.len()].copy_from_slice(&bytes);
        Ok(bytes.len())
    }
}

#[test]
fn a_stop_ends_a_stalled_pipe_after_the_bytes_it_read() {
    let (tx, go) = std::sync::mpsc::channel();
    let stop = Stop::new();
    let pipe = Pipe::spawn(Stalling { first: Some(b"{\"a\":1}\n{\"a\":2}\n".to_vec()), go }, stop.clone(), DEFAULT_IDLE).unwrap();
    let mut inputs = read(Box::new(std::io::BufReader::new(pipe)), Format::Jsonl).into_iter();
    assert_eq!(json_of(&inputs.next().unwrap().unwrap()), r#"{"a":1}"#);
    assert_eq!(json_of(&inputs.next().unwrap().unwrap()), r#"{"a":2}"#);
    // The source now stalls: a stop ends the input although it never ends.
    stop.stop();
    assert!(inputs.next().is_none());
    drop(tx);
}

#[test]
fn a_stop_ends_a_file_where_its_records_are_read() {
    let stop = Stop::new();
    let text = b"{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n".to_vec();
    // A buffer of one line, so that the stop comes between two reads.
    let source = Stoppable::new(std::io::Cursor::new(text), stop.clone());
    let mut inputs = read(Box::new(std::io::BufReader::with_capacity(8, source)), Format::Jsonl).into_iter();
    assert_eq!(json_of(&inputs.next().unwrap().unwrap()), r#"{"a":1}"#);
    stop.stop();
    assert!(inputs.next().is_none(), "the file ends at the stop");
    // Without a stop, every line is read.
    let source = Stoppable::new(std::io::Cursor::new(b"{\"a\":1}\n{\"a\":2}\n".to_vec()), Stop::new());
    assert_eq!(read(Box::new(std::io::BufReader::with_capacity(8, source)), Format::Jsonl).into_iter().count(), 2);
}

/// A source that gives its bytes a few at a time.
struct Trickle(std::io::Cursor<Vec<u8>>, usize);

impl Read for Trickle {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = out.len().min(self.1);
        self.0.read(&mut out[..n])
    }
}

#[test]
fn a_stop_inside_a_line_of_a_file_finishes_that_line_and_no_more() {
    let stop = Stop::new();
    let text = b"{\"a\":1}\n{\"a\":22222}\n{\"a\":3}\n".to_vec();
    let mut source = Stoppable::new(Trickle(std::io::Cursor::new(text), 5), stop.clone());
    let mut got = vec![0u8; 10];
    // Two reads of five bytes: into the second line.
    source.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"{\"a\":1}\n{\"");
    stop.stop();
    source.read_to_end(&mut got).unwrap();
    assert_eq!(String::from_utf8(got).unwrap(), "{\"a\":1}\n{\"a\":22222}\n");
    assert_eq!(stop.cut_bytes(), 0);
}

#[test]
fn a_stop_inside_a_line_that_does_not_end_drops_that_line() {
    // The producer stalls there, or ends there (stopped with us): either
    // way the part read is no record, and no error line.
    for producer_ends in [false, true] {
        let (tx, go) = std::sync::mpsc::channel();
        let stop = Stop::new();
        let first = Some(b"{\"a\":1}\n{\"a\":2".to_vec());
        let pipe = Pipe::spawn(Stalling { first, go }, stop.clone(), DEFAULT_IDLE).unwrap();
        let mut inputs = read(Box::new(std::io::BufReader::new(pipe)), Format::Jsonl).into_iter();
        assert_eq!(json_of(&inputs.next().unwrap().unwrap()), r#"{"a":1}"#);
        stop.stop();
        let tx = if producer_ends { None } else { Some(tx) };
        assert!(inputs.next().is_none(), "producer ends: {producer_ends}");
        assert_eq!(stop.cut_bytes(), 6);
        drop(tx);
    }
}

#[test]
fn a_stop_while_a_pipe_is_inside_a_line_waits_for_its_end() {
    let (tx, go) = std::sync::mpsc::channel();
    let stop = Stop::new();
    let pipe = Pipe::spawn(Stalling { first: Some(b"a,b\n1,x".to_vec()), go }, stop.clone(), DEFAULT_IDLE).unwrap();
    let mut inputs = read(Box::new(std::io::BufReader::new(pipe)), Format::Csv).into_iter();
    // The stop comes while the reader waits inside the line `1,x`, and the
    // line's end within the grace, with a next line after it.
    let stopper = stop.clone();
    let late = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(150));
        stopper.stop();
        std::thread::sleep(std::time::Duration::from_millis(100));
        tx.send(b"yz\n2,w\n".to_vec()).unwrap();
        tx
    });
    let all: Vec<String> = inputs.by_ref().map(|i| json_of(&i.unwrap())).collect();
    assert_eq!(all, [r#"{"a":"1","b":"xyz"}"#]);
    drop(late.join().unwrap());
}

#[test]
fn a_stalled_pipe_hands_over_the_records_read_so_far() {
    let (tx, go) = std::sync::mpsc::channel();
    let stop = Stop::new();
    let pipe = Pipe::spawn(Stalling { first: Some(b"{\"a\":1}\n{\"a\":2}\n".to_vec()), go }, stop.clone(), DEFAULT_IDLE).unwrap();
    let inputs = read(Box::new(std::io::BufReader::new(pipe)), Format::Jsonl);
    let mut chunks = read_ahead(inputs, 256, 2).unwrap();
    // Two records of a chunk of 256 arrive although the source stalls.
    let first = chunks.blocking_recv();
    match first {
        Some(Chunk::Records(r)) => assert_eq!(r.len(), 2),
        _ => panic!("expected the two records read"),
    }
    tx.send(b"{\"a\":3}\n".to_vec()).unwrap();
    stop.stop();
    let mut rest = 0;
    loop {
        match chunks.blocking_recv() {
            Some(Chunk::Records(r)) => rest += r.len(),
            Some(Chunk::End) => break,
            _ => panic!("the input ends without failing"),
        }
    }
    assert!(rest <= 1);
    drop(tx);
}

#[test]
fn lines_are_text_exactly_when_std_says_so() {
    // simdutf8 reads 64-byte blocks: with 50 to 90 bytes before it, each
    // sequence lands inside the first block, across its end and in the tail.
    let tails: [&[u8]; 5] = [
        "é€😀".as_bytes(),
        b"\xC3\x28",     // a lead byte, then no continuation
        b"\xF0\x9F\x98", // a 4-byte sequence cut short
        b"\xED\xA0\x80", // a surrogate
        b"\xFF",
    ];
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for pad in 50..90 {
        for tail in tails {
            lines.push([format!("{{\"a\":\"{}", "x".repeat(pad)).as_bytes(), tail, b"\"}"].concat());
        }
    }
    let mut text = Vec::new();
    for l in &lines {
        text.extend_from_slice(l);
        text.push(b'\n');
    }
    let reader: Box<dyn BufRead + Send> = Box::new(std::io::Cursor::new(text));
    let got: Vec<Input> = read(reader, Format::Jsonl).into_iter().map(|i| i.unwrap()).collect();
    assert_eq!(got.len(), lines.len());
    let mut refused = 0;
    for (line, input) in lines.iter().zip(&got) {
        match std::str::from_utf8(line) {
            Ok(_) => assert!(input.record.is_ok(), "{:?}", input.record),
            Err(e) => {
                refused += 1;
                let message = input.record.as_ref().unwrap_err().to_string();
                assert!(message.contains(&format!("at byte {} of the line", e.valid_up_to() + 1)), "{message}");
            }
        }
    }
    assert_eq!(refused, 40 * 4);
}
