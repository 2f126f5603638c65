//! The one place where text from outside bx (the model, a tool, the inference server, a
//! socket client) is made safe before it reaches a terminal: every character that could
//! steer the terminal or hide what is shown (C0 and C1 controls with escape among them,
//! bidirectional overrides, zero-width characters) becomes a visible `\u{…}` escape.
//! JSON output gets the same characters as JSON `\u` escapes: the same value, but no
//! raw control byte on the terminal that shows it.

use std::fmt::Write as _;

/// `text` for a terminal, newlines and tabs kept (tool output, model text).
pub(crate) fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\n' || c == '\t' || !bx_broker::is_hidden(c) {
            out.push(c);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    out
}

/// `text` on one line: newlines escaped too (a tool name, arguments, a reason).
pub(crate) fn one_line(text: &str) -> String {
    bx_broker::escape_untrusted(text, false)
}

/// A reason or an error from outside bx, as one bounded line: what a refusal or a failed
/// call prints (a reason can echo the model's arguments, of any length and with any
/// newline in them).
pub(crate) fn reason(text: &str) -> String {
    one_line(&bx_audit::bounded(text, 4 << 10))
}

/// `value` as one line of JSON with every hidden character written as a `\u` escape
/// (serde_json leaves DEL, C1 controls, bidi and zero-width characters raw).
pub(crate) fn json(value: &impl serde::Serialize) -> anyhow::Result<String> {
    Ok(json_escaped(&serde_json::to_string(value)?))
}

/// [`json`], pretty-printed.
pub(crate) fn json_pretty(value: &impl serde::Serialize) -> anyhow::Result<String> {
    Ok(json_escaped(&serde_json::to_string_pretty(value)?))
}

fn json_escaped(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        // Hidden characters occur only inside JSON strings, where `\u` escapes mean the
        // same character.
        if bx_broker::is_hidden(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The status of a command whose standard output was closed under it: 128 + SIGPIPE.
const EXIT_CLOSED_PIPE: i32 = 141;

/// Writes to standard output. A reader that went away (`bx approvals | head`) ends the
/// command quietly: there is nobody left to tell, and a panic about it would only be
/// noise. The status is 141, what a shell reports for a command a closed pipe ended
/// (as for git or cat), not 0: `bx audit verify | head -1` must not pass for a clean log
/// because its reader left early.
pub(crate) fn out(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(EXIT_CLOSED_PIPE);
        }
        // Anything else (a full disk behind a redirect) is worth a word, once.
        err(format_args!("bx: writing to standard output: {e}\n"));
        std::process::exit(1);
    }
}

/// Writes to standard error, ignoring a failure: with stderr closed there is nobody to
/// tell, and `eprintln!` would panic (and so end a call part-way, its records unfinished).
pub(crate) fn err(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_fmt(args).and_then(|()| stderr.flush());
}

/// `eprint!` through [`err`].
macro_rules! errp {
    ($($arg:tt)*) => { $crate::term::err(format_args!($($arg)*)) };
}

/// `eprintln!` through [`err`].
macro_rules! errln {
    () => { $crate::term::err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::term::err(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` through [`out`].
macro_rules! outp {
    ($($arg:tt)*) => { $crate::term::out(format_args!($($arg)*)) };
}

/// `println!` through [`out`].
macro_rules! outln {
    () => { $crate::term::out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::term::out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Whether standard error goes nowhere a person reads: a device that is not a terminal
/// (`/dev/null`, `/dev/zero`), or closed (which Rust's runtime turns into `/dev/null` at
/// start, and whose writes then succeed unseen). A file or a pipe is the owner's own
/// arrangement (a log, a script that answers): those are shown to.
pub(crate) fn stderr_is_void() -> bool {
    use std::io::IsTerminal as _;
    use std::os::fd::AsFd as _;
    use std::os::unix::fs::FileTypeExt as _;
    let err = std::io::stderr();
    let Ok(fd) = err.as_fd().try_clone_to_owned() else { return true };
    let Ok(meta) = std::fs::File::from(fd).metadata() else { return true };
    meta.file_type().is_char_device() && !err.is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "a\u{1b}]0;pwned\u{7}b\u{9b}31mc\u{202e}d\u{200b}e\u{e0041}\t\nf";

    #[test]
    fn no_raw_control_reaches_the_terminal() {
        let s = shown(HOSTILE);
        assert!(!s.chars().any(bx_broker::is_hidden), "{s:?}");
        assert_eq!(s, "a\\u{1b}]0;pwned\\u{7}b\\u{9b}31mc\\u{202e}d\\u{200b}e\\u{e0041}\t\nf");
        assert_eq!(one_line("a\nb\tc"), "a\\u{a}b\\u{9}c");
    }

    #[test]
    fn json_keeps_the_value_and_escapes_every_hidden_character() {
        let text = json(&serde_json::json!({ "t": HOSTILE })).unwrap();
        assert!(text.is_ascii() || !text.chars().any(bx_broker::is_hidden), "{text}");
        assert!(
            text.contains("\\u009b") && text.contains("\\u202e") && text.contains("\\udb40\\udc41"),
            "{text}"
        );
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["t"], HOSTILE);
    }
}
