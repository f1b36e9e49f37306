//! The encodings of `base64_decode(Enc)` (spec §9): bytes to text.
//!
//! Most of them are WHATWG encodings, decoded by `encoding_rs` (no_std +
//! alloc; its tables are what a browser uses). The few it does not have as
//! such are small enough to decode here: `Ascii`, ISO-8859-1, -9 and -11,
//! `HZ` (RFC 1843, whose two-byte codes are GB2312 and so go through the GBK
//! decoder), and `Imap` (bytes shown as printable text with escapes).
//! Invalid sequences become U+FFFD, never an error (spec §10.2).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use encoding_rs::Encoding;
use serde::{Deserialize, Serialize};

/// An encoding that `base64_decode` accepts, other than `Utf8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Charset {
    Utf16le,
    Utf16be,
    Gbk,
    Gb18030,
    Big52003,
    EucJp,
    Windows31j,
    Iso2022Jp,
    Windows874,
    /// `Windows1250` … `Windows1258`: the last digit.
    Windows125x(u8),
    Ibm866,
    /// `Iso88591` … `Iso885916` (there is no ISO-8859-12): the part number.
    Iso8859(u8),
    Koi8R,
    Koi8U,
    MacCyrillic,
    MacRoman,
    Ascii,
    Hz,
    Windows949,
    Imap,
}

impl Charset {
    /// The encoding an OML rule names (`Utf16le`, `Iso88595`, …); `Utf8` is
    /// not one of these (it is `base64_decode`'s default).
    pub fn by_name(name: &str) -> Option<Charset> {
        use Charset::*;
        Some(match name {
            "Utf16le" => Utf16le,
            "Utf16be" => Utf16be,
            "Gbk" => Gbk,
            "Gb18030" => Gb18030,
            "Big52003" => Big52003,
            "EucJp" => EucJp,
            "Windows31j" => Windows31j,
            "Iso2022Jp" => Iso2022Jp,
            "Windows874" => Windows874,
            "Ibm866" => Ibm866,
            "Koi8R" => Koi8R,
            "Koi8U" => Koi8U,
            "MacCyrillic" => MacCyrillic,
            "MacRoman" => MacRoman,
            "Ascii" => Ascii,
            "HZ" => Hz,
            "Windows949" => Windows949,
            "Imap" => Imap,
            _ => {
                if let Some(n) = name.strip_prefix("Windows125") {
                    return match n.parse::<u8>() {
                        Ok(d) if n.len() == 1 && d <= 8 => Some(Windows125x(d)),
                        _ => None,
                    };
                }
                let n = name.strip_prefix("Iso8859")?;
                return match n.parse::<u8>() {
                    Ok(p) if (1..=16).contains(&p) && p != 12 && !n.starts_with('0') => Some(Iso8859(p)),
                    _ => None,
                };
            }
        })
    }

    /// The names `by_name` accepts, for error messages.
    pub const NAMES: &'static str = "Utf8, Utf16le, Utf16be, Gbk, Gb18030, Big52003, EucJp, Windows31j, Iso2022Jp, \
        Windows874, Windows1250 … Windows1258, Ibm866, Iso88591 … Iso885916 (no Iso885912), Koi8R, Koi8U, \
        MacCyrillic, MacRoman, Ascii, HZ, Windows949, Imap";

    /// `bytes` as text in this encoding.
    pub fn decode(self, bytes: &[u8]) -> String {
        use Charset::*;
        match self {
            Ascii => bytes.iter().map(|&b| if b < 0x80 { b as char } else { char::REPLACEMENT_CHARACTER }).collect(),
            Iso8859(1) => bytes.iter().map(|&b| b as char).collect(),
            Iso8859(9) => bytes.iter().map(|&b| latin5(b)).collect(),
            Iso8859(11) => bytes.iter().map(|&b| thai(b)).collect(),
            Hz => hz(bytes),
            Imap => imap(bytes),
            other => whatwg(other).map(|e| e.decode_without_bom_handling(bytes).0.into_owned()).unwrap_or_default(),
        }
    }
}

/// The `encoding_rs` decoder for a charset it has.
fn whatwg(c: Charset) -> Option<&'static Encoding> {
    use Charset::*;
    use encoding_rs as e;
    Some(match c {
        Utf16le => e::UTF_16LE,
        Utf16be => e::UTF_16BE,
        // GBK and GB18030 share one decoder: GB18030 decodes every GBK byte string the same way.
        Gbk => e::GBK,
        Gb18030 => e::GB18030,
        // Big5 with the HKSCS additions: a superset of Big5-2003.
        Big52003 => e::BIG5,
        EucJp => e::EUC_JP,
        // WHATWG's Shift_JIS is Microsoft's code page 932, Windows-31J.
        Windows31j => e::SHIFT_JIS,
        Iso2022Jp => e::ISO_2022_JP,
        Windows874 => e::WINDOWS_874,
        Windows125x(0) => e::WINDOWS_1250,
        Windows125x(1) => e::WINDOWS_1251,
        Windows125x(2) => e::WINDOWS_1252,
        Windows125x(3) => e::WINDOWS_1253,
        Windows125x(4) => e::WINDOWS_1254,
        Windows125x(5) => e::WINDOWS_1255,
        Windows125x(6) => e::WINDOWS_1256,
        Windows125x(7) => e::WINDOWS_1257,
        Windows125x(8) => e::WINDOWS_1258,
        Ibm866 => e::IBM866,
        Iso8859(2) => e::ISO_8859_2,
        Iso8859(3) => e::ISO_8859_3,
        Iso8859(4) => e::ISO_8859_4,
        Iso8859(5) => e::ISO_8859_5,
        Iso8859(6) => e::ISO_8859_6,
        Iso8859(7) => e::ISO_8859_7,
        Iso8859(8) => e::ISO_8859_8,
        Iso8859(10) => e::ISO_8859_10,
        Iso8859(13) => e::ISO_8859_13,
        Iso8859(14) => e::ISO_8859_14,
        Iso8859(15) => e::ISO_8859_15,
        Iso8859(16) => e::ISO_8859_16,
        Koi8R => e::KOI8_R,
        Koi8U => e::KOI8_U,
        MacCyrillic => e::X_MAC_CYRILLIC,
        MacRoman => e::MACINTOSH,
        // WHATWG's EUC-KR is Microsoft's code page 949 (Unified Hangul Code).
        Windows949 => e::EUC_KR,
        _ => return None,
    })
}

/// ISO-8859-9 (Latin-5): Latin-1 with six Turkish letters.
fn latin5(b: u8) -> char {
    match b {
        0xD0 => 'Ğ',
        0xDD => 'İ',
        0xDE => 'Ş',
        0xF0 => 'ğ',
        0xFD => 'ı',
        0xFE => 'ş',
        _ => b as char,
    }
}

/// ISO-8859-11 (TIS-620 with NBSP): Thai in two runs from U+0E01.
fn thai(b: u8) -> char {
    let cp = match b {
        0x00..=0xA0 => b as u32,
        0xA1..=0xDA => 0x0E01 + (b - 0xA1) as u32,
        0xDF..=0xFB => 0x0E3F + (b - 0xDF) as u32,
        _ => 0xFFFD,
    };
    char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// HZ (RFC 1843): ASCII, with GB2312 between `~{` and `~}`; `~~` is `~` and
/// `~` before a line end joins the lines.
fn hz(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut gb: Vec<u8> = Vec::new();
    let flush = |gb: &mut Vec<u8>, out: &mut String| {
        if !gb.is_empty() {
            out.push_str(&encoding_rs::GBK.decode_without_bom_handling(gb).0);
            gb.clear();
        }
    };
    let (mut i, mut in_gb) = (0, false);
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'~' {
            match bytes.get(i + 1) {
                Some(b'{') if !in_gb => in_gb = true,
                Some(b'}') if in_gb => {
                    flush(&mut gb, &mut out);
                    in_gb = false;
                }
                Some(b'~') if !in_gb => out.push('~'),
                Some(b'\n') if !in_gb => {}
                Some(b'\r') if !in_gb && bytes.get(i + 2) == Some(&b'\n') => i += 1,
                _ => {
                    flush(&mut gb, &mut out);
                    out.push(char::REPLACEMENT_CHARACTER);
                    i += 1;
                    continue;
                }
            }
            i += 2;
            continue;
        }
        if in_gb {
            match (b, bytes.get(i + 1)) {
                (0x21..=0x7E, Some(&c @ 0x21..=0x7E)) => {
                    gb.extend_from_slice(&[b | 0x80, c | 0x80]);
                    i += 2;
                }
                (b'\n', _) => {
                    // A line end inside GB mode ends it (decoders are lenient here).
                    flush(&mut gb, &mut out);
                    out.push('\n');
                    in_gb = false;
                    i += 1;
                }
                _ => {
                    flush(&mut gb, &mut out);
                    out.push(char::REPLACEMENT_CHARACTER);
                    i += 1;
                }
            }
            continue;
        }
        out.push(if b < 0x80 { b as char } else { char::REPLACEMENT_CHARACTER });
        i += 1;
    }
    flush(&mut gb, &mut out);
    out
}

/// Bytes as printable ASCII: `\t`, `\n`, `\r`, `\"` and `\\` escaped, any
/// other byte outside `0x20..=0x7E` as `\xNN` (lowercase hex).
fn imap(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7E => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(name: &str, bytes: &[u8]) -> String {
        Charset::by_name(name).unwrap_or_else(|| panic!("{name}")).decode(bytes)
    }

    #[test]
    fn names_cover_the_spec_list_and_nothing_else() {
        for n in ["Utf16le", "Windows1250", "Windows1258", "Iso88591", "Iso88599", "Iso885911", "Iso885916", "HZ", "Imap"] {
            assert!(Charset::by_name(n).is_some(), "{n}");
        }
        for n in ["Utf8", "Windows1259", "Windows12500", "Iso885912", "Iso885917", "Iso88590", "Iso885901", "hz", "Latin1"] {
            assert!(Charset::by_name(n).is_none(), "{n}");
        }
    }

    #[test]
    fn multibyte_encodings_decode_their_own_bytes() {
        assert_eq!(dec("Utf16le", &[0x2d, 0x4e, 0x87, 0x65]), "中文");
        assert_eq!(dec("Utf16be", &[0x4e, 0x2d, 0x65, 0x87]), "中文");
        assert_eq!(dec("Gbk", &[0xd6, 0xd0, 0xce, 0xc4]), "中文");
        assert_eq!(dec("Big52003", &[0xa4, 0xa4, 0xa4, 0xe5]), "中文");
        assert_eq!(dec("Windows31j", &[0x93, 0xfa, 0x96, 0x7b]), "日本");
        assert_eq!(dec("EucJp", &[0xc6, 0xfc, 0xcb, 0xdc]), "日本");
        assert_eq!(dec("Windows949", &[0xc7, 0xd1, 0xb1, 0xb9]), "한국");
        assert_eq!(dec("Iso2022Jp", b"\x1b$BF|K\\\x1b(B"), "日本");
    }

    #[test]
    fn single_byte_encodings_differ_where_they_should() {
        assert_eq!(dec("Iso88591", &[0x80, 0xe9]), "\u{80}é");
        assert_eq!(dec("Windows1252", &[0x80, 0xe9]), "€é");
        assert_eq!(dec("Iso88599", &[0xdd, 0xfd, 0xe9]), "İıé");
        assert_eq!(dec("Iso885911", &[0xa1, 0xdf, 0xfb, 0xdb]), "ก฿๛\u{fffd}");
        assert_eq!(dec("Koi8R", &[0xf0, 0xd2, 0xc9]), "При");
        assert_eq!(dec("Ascii", b"ok\xff"), "ok\u{fffd}");
    }

    #[test]
    fn hz_switches_between_ascii_and_gb2312() {
        assert_eq!(dec("HZ", b"a~{VPND~}b~~c"), "a中文b~c");
        assert_eq!(dec("HZ", b"x~\ny"), "xy");
        assert_eq!(dec("HZ", b"~{VP"), "中");
        assert_eq!(dec("HZ", b"~x"), "\u{fffd}x");
    }

    #[test]
    fn imap_escapes_what_is_not_printable() {
        assert_eq!(dec("Imap", b"GET /\r\n\t\"\\\x00\xbd~"), "GET /\\r\\n\\t\\\"\\\\\\x00\\xbd~");
    }
}
