//! Where a span of a file the owner edits by hand lies (line and column) and the caret
//! snippet under it: computed once here for policy errors and for `config.toml` errors,
//! rendered by `annotate-snippets` (the renderer of rustc's own diagnostics).

use std::ops::Range;

use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};

/// A span located in its text: 1-based line and column (in characters) of its start, and
/// the snippet that shows it (the source line, a caret line under the span).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The source line and a caret line under the span, without a trailing newline.
    pub snippet: String,
}

/// A text with the byte offset where each line starts, so locating a span is a binary
/// search rather than a scan from the start (a policy of 20,000 grants with an error on
/// each still loads in linear time), and the characters before every [`CHUNK`] bytes, so
/// a column on a long line costs at most a chunk (4,096 errors on one line of 94 KB took
/// 2.1 s when each counted and rendered its whole line).
#[derive(Debug)]
pub struct SourceLines<'a> {
    text: &'a str,
    starts: Vec<usize>,
    /// `chars[k]`: the characters that start before byte `k * CHUNK`.
    chars: Vec<usize>,
}

/// Bytes between two character counts kept by [`SourceLines`].
const CHUNK: usize = 1024;

/// Bytes of a line shown on either side of a span; longer lines are cut, marked `...`.
const CONTEXT: usize = 96;

impl<'a> SourceLines<'a> {
    /// Indexes the lines of `text`.
    pub fn new(text: &'a str) -> SourceLines<'a> {
        let newlines = text.bytes().enumerate().filter(|(_, b)| *b == b'\n').map(|(i, _)| i + 1);
        let mut chars = Vec::with_capacity(text.len() / CHUNK + 1);
        let mut seen = 0;
        for chunk in text.as_bytes().chunks(CHUNK) {
            chars.push(seen);
            seen += chunk.iter().filter(|b| !is_continuation(**b)).count();
        }
        chars.push(seen);
        SourceLines { text, starts: std::iter::once(0).chain(newlines).collect(), chars }
    }

    /// The characters that start before byte `at`.
    fn chars_before(&self, at: usize) -> usize {
        let k = at / CHUNK;
        let rest = &self.text.as_bytes()[k * CHUNK..at];
        self.chars[k] + rest.iter().filter(|b| !is_continuation(**b)).count()
    }

    /// The 1-based line holding byte `offset` (the last line past the end).
    pub fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&start| start <= offset).max(1)
    }

    /// Locates `span` (byte offsets; clamped to the text and to character boundaries)
    /// and renders the snippet of its first line. Only that line, cut to [`CONTEXT`]
    /// bytes either side of the span, is given to the renderer, so each error costs the
    /// length of its span, not of its line or of the file.
    pub fn locate(&self, span: Range<usize>) -> Located {
        let text = self.text;
        let start = floor_char(text, span.start.min(text.len()));
        let end = floor_char(text, span.end.clamp(start, text.len()));
        let line = self.line_of(start);
        let line_start = self.starts[line - 1];
        let line_end = self.starts.get(line).map_or(text.len(), |next| next - 1);
        let column = self.chars_before(start) - self.chars_before(line_start) + 1;
        // The window of the line shown: the span (up to CONTEXT bytes of it) with CONTEXT
        // bytes either side, each cut end marked.
        let from = floor_char(text, start.saturating_sub(CONTEXT).max(line_start));
        let shown_end = floor_char(text, end.min(line_end).min(start.saturating_add(CONTEXT)));
        let until = ceil_char(text, shown_end.saturating_add(CONTEXT).min(line_end));
        let head = if from > line_start { "..." } else { "" };
        let tail = if until < line_end { "..." } else { "" };
        let source = format!("{head}{}{tail}", &text[from..until]);
        let at = head.len() + (start - from);
        // At least one character is marked (an error at the end of a line or of the file
        // still gets a caret).
        let to = head.len() + (shown_end - from);
        let to = if to > at { to } else { next_char(&source, at) };
        let report = [Group::with_level(Level::ERROR).element(
            Snippet::source(&source)
                .line_start(line)
                .fold(false)
                .annotation(AnnotationKind::Primary.span(at..to)),
        )];
        let snippet = Renderer::plain().render(&report);
        Located { line, column, snippet: snippet.trim_end_matches('\n').to_owned() }
    }
}

fn floor_char(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// A byte that continues a UTF-8 character rather than starting one.
fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// The byte after the character at `at` of `line` (`at` itself at the end of the line).
fn next_char(line: &str, at: usize) -> usize {
    line[at..].chars().next().map_or(at, |c| at + c.len_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_a_span_and_puts_carets_under_it() {
        let text = "[[grant]]\ntool = \"*\"\npath = \"/\"\n";
        let at = text.find("\"/\"").unwrap();
        let got = SourceLines::new(text).locate(at..at + 3);
        let snippet = "  |\n3 | path = \"/\"\n  |        ^^^";
        assert_eq!(got, Located { line: 3, column: 8, snippet: snippet.into() });
    }

    #[test]
    fn columns_count_characters_and_an_empty_span_still_gets_a_caret() {
        let text = "a = \"é\" x\n";
        let at = text.find('x').unwrap();
        let got = SourceLines::new(text).locate(at..at);
        assert_eq!(got.column, 9);
        assert_eq!(got.snippet, "  |\n1 | a = \"é\" x\n  |         ^");
        // Past the end, and inside a character: clamped, never a panic.
        let end = SourceLines::new(text).locate(text.len() + 5..text.len() + 9);
        assert_eq!((end.line, end.column), (2, 1));
        let inside = SourceLines::new(text).locate(6..7);
        assert_eq!((inside.line, inside.column), (1, 6));
    }

    #[test]
    fn a_long_line_is_cut_around_its_span_and_columns_still_count_characters() {
        // 5,000 characters of two bytes each before the span, on one line.
        let text = format!("a = \"{}\" bad = 1 {}\n", "é".repeat(5000), "z".repeat(5000));
        let at = text.find("bad").unwrap();
        let got = SourceLines::new(&text).locate(at..at + 3);
        assert_eq!((got.line, got.column), (1, 5 + 5000 + 3));
        let shown = got.snippet.lines().nth(1).unwrap();
        assert!(shown.starts_with("1 | ...é") && shown.ends_with("z..."), "{shown}");
        assert!(shown.len() < 4 * CONTEXT, "{} bytes shown", shown.len());
        let carets = got.snippet.lines().nth(2).unwrap();
        let caret_col = carets.find('^').unwrap();
        assert_eq!(&shown.chars().skip(caret_col).take(3).collect::<String>(), "bad");
        // A span longer than the window, and spans that start or end inside a character.
        for span in [at..text.len(), 5..9, 6..at + 1] {
            let cut = SourceLines::new(&text).locate(span);
            assert!(cut.snippet.len() < 8 * CONTEXT);
        }
    }
}
