//! A bound on a TOML text's shape, checked before the TOML parser builds anything.
//!
//! Every dot in a key (`a.b.c = 1`) makes the parser build a table. 2 MiB of distinct
//! 60-deep dotted keys made `toml` peak at 1 GiB before bx refused the file (found
//! fuzzing the policy and config parsers). bx's own files need no dotted keys at all, so
//! a scan that counts the dots outside strings and comments refuses such a file in
//! linear time and constant memory. The scan is a few lines of lexing: no TOML library
//! offers a shape limit before it builds the document.

/// The most dots outside strings and comments in `policy.toml` or `config.toml` (1,000).
/// A float (`temperature = 0.7`) has one; bx's own keys have none.
pub const MAX_KEY_DOTS: usize = 1000;

/// Refuses `text` when it has more than [`MAX_KEY_DOTS`] dots outside strings and
/// comments, giving the byte offset of the first dot past the bound.
pub fn check(text: &str) -> Result<(), (usize, String)> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut dots = 0;
    // The end of a string that opens at `i` with `quote` (once, or three times for a
    // multi-line string); basic strings (`"`) take backslash escapes.
    let skip_string = |i: usize, quote: u8| -> usize {
        let triple = b[i..].starts_with(&[quote; 3]);
        let mut j = i + if triple { 3 } else { 1 };
        while j < b.len() {
            if quote == b'"' && b[j] == b'\\' {
                j += 2;
                continue;
            }
            if triple && b[j..].starts_with(&[quote; 3]) {
                return j + 3;
            }
            if !triple && (b[j] == quote || b[j] == b'\n') {
                return j + 1;
            }
            j += 1;
        }
        b.len()
    };
    while i < b.len() {
        match b[i] {
            b'#' => {
                i = memchr_newline(&b[i..]).map_or(b.len(), |n| i + n);
                continue;
            }
            q @ (b'"' | b'\'') => {
                i = skip_string(i, q);
                continue;
            }
            b'.' => {
                dots += 1;
                if dots > MAX_KEY_DOTS {
                    return Err((
                        i,
                        format!(
                            "more than {MAX_KEY_DOTS} dotted keys; bx's files need none (a file of deep dotted keys would take the parser gigabytes)"
                        ),
                    ));
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

fn memchr_newline(b: &[u8]) -> Option<usize> {
    b.iter().position(|c| *c == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_in_strings_and_comments_do_not_count_and_keys_do() {
        let many_in_strings = "[[grant]]\npath = \"/home/o/.ssh/.x\" # a.b.c\n".repeat(2000);
        assert!(check(&many_in_strings).is_ok());
        let literal = "p = '''a.b\n.c'''\nq = 'x.y'\nr = \"\"\"a\\\".b\"\"\"\n".repeat(1000);
        assert!(check(&literal).is_ok());
        let deep = format!("{} = 1\n", vec!["a"; MAX_KEY_DOTS + 2].join("."));
        let (at, why) = check(&deep).unwrap_err();
        assert_eq!(at, 2 * MAX_KEY_DOTS + 1);
        assert!(why.contains("dotted keys"));
        assert!(check("temperature = 0.7\n").is_ok());
    }

    /// Regression (found fuzzing): 2 MiB of distinct 60-deep dotted keys made the policy
    /// parser peak at 1 GiB (measured with `/usr/bin/time -v bx policy check`) before it
    /// refused the file. It is now refused before the TOML parser runs.
    #[test]
    fn a_policy_of_deep_dotted_keys_is_refused_before_it_is_parsed() {
        let line = |i: usize| format!("k{i}.{} = 1\n", vec!["a"; 60].join("."));
        let text: String = (0..100).map(line).collect();
        let e = crate::Policy::parse("policy.toml", &text).unwrap_err().to_string();
        assert!(e.contains("dotted keys") && e.contains("policy.toml:17:"), "{e}");
    }
}
