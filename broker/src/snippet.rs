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
/// each still loads in linear time).
#[derive(Debug)]
pub struct SourceLines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> SourceLines<'a> {
    /// Indexes the lines of `text`.
    pub fn new(text: &'a str) -> SourceLines<'a> {
        let newlines = text.bytes().enumerate().filter(|(_, b)| *b == b'\n').map(|(i, _)| i + 1);
        SourceLines { text, starts: std::iter::once(0).chain(newlines).collect() }
    }

    /// The 1-based line holding byte `offset` (the last line past the end).
    pub fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&start| start <= offset).max(1)
    }

    /// Locates `span` (byte offsets; clamped to the text and to character boundaries)
    /// and renders the snippet of its first line. Only that line is given to the
    /// renderer, so each error costs the length of its line, not of the file.
    pub fn locate(&self, span: Range<usize>) -> Located {
        let text = self.text;
        let start = floor_char(text, span.start.min(text.len()));
        let end = floor_char(text, span.end.clamp(start, text.len()));
        let line = self.line_of(start);
        let line_start = self.starts[line - 1];
        let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        let column = text[line_start..start].chars().count() + 1;
        let source = &text[line_start..line_end];
        let at = start - line_start;
        // At least one character is marked (an error at the end of a line or of the file
        // still gets a caret).
        let to = end.min(line_end) - line_start;
        let to = if to > at { to } else { next_char(source, at) };
        let report = [Group::with_level(Level::ERROR).element(
            Snippet::source(source)
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
}
