//! The plain-text table of the commands that list rows (`offsets`, `offsets commit`, `topics`): a header line, then
//! one line per row, each column as wide as its widest cell, columns two spaces apart, no trailing spaces.
//!
//! Why one printer: the commands wrote the same width loop four times, and a fix to one (a width counted in bytes
//! instead of characters, a trailing blank that breaks `diff` in scripts) must reach all. The column count is a
//! const generic, so a row with a missing cell does not compile.

use std::io::Write;

/// Writes `header` and `rows` to `out` as aligned columns. Widths count characters (not bytes), so a topic name
/// with non-ASCII letters does not shift the columns after it.
pub fn print<const N: usize>(out: &mut dyn Write, header: [&str; N], rows: &[[String; N]]) -> std::io::Result<()> {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut line = |cells: [&str; N]| -> std::io::Result<()> {
        let text: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        writeln!(out, "{}", text.join("  ").trim_end())
    };
    line(header)?;
    for row in rows {
        line(row.each_ref().map(String::as_str))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::print;

    fn printed<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
        let mut out = Vec::new();
        print(&mut out, header, rows).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_lines_end_without_blanks() {
        let rows = [
            ["orders-long-name".to_string(), "3".to_string(), String::new()],
            ["a".to_string(), "12345".to_string(), "x".to_string()],
        ];
        assert_eq!(
            printed(["TOPIC", "N", "NOTE"], &rows),
            "TOPIC             N      NOTE\n\
             orders-long-name  3\n\
             a                 12345  x\n"
        );
    }

    #[test]
    fn widths_count_characters_not_bytes() {
        let rows = [
            ["größe".to_string(), "1".to_string()],
            ["ab".to_string(), "2".to_string()],
        ];
        assert_eq!(printed(["T", "P"], &rows), "T      P\ngröße  1\nab     2\n");
    }

    #[test]
    fn no_rows_prints_the_header_alone() {
        assert_eq!(printed(["GROUP", "TOPIC"], &[]), "GROUP  TOPIC\n");
    }
}
