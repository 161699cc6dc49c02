//! Java's text rules, shared by every reader of the broker's small text files
//! (checkpoints, `meta.properties`, `partition.metadata`, `server.properties`,
//! partition directory names).
//!
//! The broker parses these files with `java.util.regex` (`\s+`), `BufferedReader`,
//! `String.trim` and `java.util.Properties`; a byte-exact mirror must accept and
//! reject exactly what they do, so the rules live here once instead of being
//! approximated with Rust's Unicode-aware `str` helpers in each reader.

/// Java's `\s`: `[ \t\n\x0B\f\r]` (ASCII only, unlike [`char::is_whitespace`]).
pub(crate) fn is_java_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

/// `Pattern.split(input)` with limit 0 for a pattern of the form `<lead>\s+`:
/// `lead` is `None` for `\s+` and `Some(':')` for `:\s+`. Like Java, a match at the
/// start yields a leading empty string, trailing empty strings are dropped, and an
/// input without any match is returned whole.
pub(crate) fn java_split(input: &str, lead: Option<char>) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut matched = false;
    let mut chars = input.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let sep_start = i;
        let after_lead = match lead {
            Some(l) if c == l => matches!(chars.peek(), Some(&(_, n)) if is_java_whitespace(n)),
            Some(_) => false,
            None => is_java_whitespace(c),
        };
        if !after_lead {
            continue;
        }
        // Consume the whitespace run (the lead, if any, is already consumed).
        let mut end = i + c.len_utf8();
        while let Some(&(j, n)) = chars.peek() {
            if !is_java_whitespace(n) {
                break;
            }
            end = j + n.len_utf8();
            chars.next();
        }
        parts.push(&input[start..sep_start]);
        start = end;
        matched = true;
    }
    if !matched {
        return vec![input];
    }
    parts.push(&input[start..]);
    while parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts
}

/// Lines as `BufferedReader.readLine` returns them (terminated by `\n`, `\r` or
/// `\r\n`; a last line without terminator counts), with their byte positions.
pub(crate) fn java_lines(text: &str) -> Vec<(u64, &str)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes.get(i) {
            Some(b'\n') => {
                out.push((start as u64, &text[start..i]));
                i += 1;
                start = i;
            }
            Some(b'\r') => {
                out.push((start as u64, &text[start..i]));
                i += if bytes.get(i + 1) == Some(&b'\n') { 2 } else { 1 };
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < bytes.len() {
        out.push((start as u64, &text[start..]));
    }
    out
}

/// Java's `String.trim`: strips every char <= ' ' at both ends.
pub(crate) fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= ' ')
}

/// `Properties.saveConvert` with Unicode escaping (as `store(OutputStream)` does):
/// escapes `\`, `=`, `:`, `#`, `!`, control whitespace, spaces in keys, a leading
/// space in values, and every char outside `0x20..=0x7e` as `\uXXXX` (UTF-16
/// units). The output is ASCII, so Kafka's ISO-8859-1 reader gets it back intact
/// (Kafka's own `store(Writer)` writes such chars raw in UTF-8 and misreads them).
pub(crate) fn escape_property(s: &str, is_key: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, c) in s.chars().enumerate() {
        match c {
            ' ' if i == 0 || is_key => out.push_str("\\ "),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{0C}' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
    out
}

/// `Properties.load(InputStream)`: ISO-8859-1 text, `#`/`!` comments, `\`
/// continuation lines, key ended by the first unescaped `=`, `:` or whitespace,
/// `\t \n \r \f \uXXXX` escapes. Returns pairs in file order (later keys win).
pub(crate) fn parse_java_properties(bytes: &[u8]) -> Vec<(String, String)> {
    let text: String = bytes.iter().map(|&b| char::from(b)).collect();
    let is_ws = |c: char| matches!(c, ' ' | '\t' | '\u{0C}');
    // Join logical lines.
    let mut logical: Vec<String> = Vec::new();
    let mut pending: Option<String> = None;
    for raw in java_lines(&text).into_iter().map(|(_, l)| l) {
        let line = raw.trim_start_matches(is_ws);
        if pending.is_none() && (line.is_empty() || line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        let trailing_backslashes = line.chars().rev().take_while(|&c| c == '\\').count();
        let continues = trailing_backslashes % 2 == 1;
        let body = if continues { &line[..line.len() - 1] } else { line };
        let mut acc = pending.take().unwrap_or_default();
        acc.push_str(body);
        if continues {
            pending = Some(acc);
        } else {
            logical.push(acc);
        }
    }
    if let Some(acc) = pending {
        logical.push(acc);
    }
    logical
        .iter()
        .map(|line| {
            let chars: Vec<char> = line.chars().collect();
            let mut key_end = chars.len();
            let mut value_start = chars.len();
            let mut i = 0;
            while i < chars.len() {
                let c = chars.get(i).copied().unwrap_or(' ');
                if c == '\\' {
                    i += 2;
                    continue;
                }
                if c == '=' || c == ':' || is_ws(c) {
                    key_end = i;
                    let mut j = i;
                    while chars.get(j).is_some_and(|&c| is_ws(c)) {
                        j += 1;
                    }
                    if !is_ws(c) {
                        j = i + 1;
                    } else if chars.get(j).is_some_and(|&c| c == '=' || c == ':') {
                        j += 1;
                    }
                    while chars.get(j).is_some_and(|&c| is_ws(c)) {
                        j += 1;
                    }
                    value_start = j;
                    break;
                }
                i += 1;
            }
            let key: String = chars.get(..key_end).unwrap_or_default().iter().collect();
            let value: String = chars.get(value_start..).unwrap_or_default().iter().collect();
            (unescape_property(&key), unescape_property(&value))
        })
        .collect()
}

/// Undo `Properties` escapes. Java strings are UTF-16, so `\uD83D\uDE00` pairs are
/// combined; a lone surrogate or bad hex becomes U+FFFD (Java would throw or keep it).
pub(crate) fn unescape_property(s: &str) -> String {
    let mut units: Vec<u16> = Vec::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        let c = if c == '\\' {
            match chars.next() {
                Some('t') => '\t',
                Some('n') => '\n',
                Some('r') => '\r',
                Some('f') => '\u{0C}',
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    let well_formed = hex.len() == 4 && hex.chars().all(|h| h.is_ascii_hexdigit());
                    match u16::from_str_radix(&hex, 16) {
                        Ok(unit) if well_formed => {
                            units.push(unit);
                            continue;
                        }
                        _ => char::REPLACEMENT_CHARACTER,
                    }
                }
                Some(other) => other,
                None => continue,
            }
        } else {
            c
        };
        let mut buf = [0u16; 2];
        units.extend_from_slice(c.encode_utf16(&mut buf));
    }
    String::from_utf16_lossy(&units)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_split_matches_pattern_split() {
        assert_eq!(java_split("a b  c", None), vec!["a", "b", "c"]);
        assert_eq!(
            java_split(" a b", None),
            vec!["", "a", "b"],
            "leading match keeps an empty string"
        );
        assert_eq!(java_split("a b \t", None), vec!["a", "b"], "trailing empties dropped");
        assert_eq!(java_split("", None), vec![""]);
        assert!(java_split("   ", None).is_empty());
        assert_eq!(java_split("version: 0", Some(':')), vec!["version", "0"]);
        assert_eq!(java_split("version:0", Some(':')), vec!["version:0"]);
        assert_eq!(java_split("a: b: c", Some(':')), vec!["a", "b", "c"]);
        assert_eq!(java_split("a:: b", Some(':')), vec!["a:", "b"]);
    }
}
