//! Which tools the first reply of a turn may call, for a small model in constrained mode
//! (`[inference] route_tools`, docs/agent.md#small-models): the ones the owner's words
//! point at. Chosen by words alone, so the same request always gets the same tools, in
//! microseconds. Only the reply's grammar narrows: the system prompt still lists every
//! tool, so its bytes (and the server's prompt cache) stay the same for a tool epoch.
//! After the first result every tool is offered again, for the call that follows a
//! listing or a search.

use std::collections::BTreeSet;

use bx_infer::ToolDef;

/// What the router knows of one tool.
#[derive(Debug, Clone)]
pub(crate) struct Cues {
    /// The tool's name.
    pub name: String,
    /// The words that point at it: its name's parts, and its description's words of four
    /// letters or more, lowercased.
    pub words: BTreeSet<String>,
    /// It fetches a URL named in its arguments.
    pub fetches: bool,
}

impl Cues {
    /// The cues of `def`; `fetches` from what the tool says it reaches.
    pub(crate) fn of(def: &ToolDef, fetches: bool) -> Cues {
        // The name's parts (`fs.read`: `fs`, `read`), whatever their length.
        let mut words: BTreeSet<String> = words_of(&def.name).collect();
        words.extend(
            words_of(&def.description).filter(|w| w.len() >= 4 && !STOP.contains(&w.as_str())),
        );
        Cues { name: def.name.clone(), words, fetches }
    }
}

/// Words too common in tool descriptions or requests to point at one tool.
const STOP: &[&str] = &[
    "about", "also", "given", "into", "more", "once", "only", "optional", "path", "returns",
    "text", "than", "that", "them", "then", "there", "these", "this", "unless", "what", "when",
    "where", "which", "with", "your",
];

/// The lowercased alphanumeric runs of `text`.
fn words_of(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// Whether a request's word and a tool's cue are the same word: equal, or one the other's
/// start with at least four letters in common (`reading` and `read`, `lists` and `list`).
fn same(word: &str, cue: &str) -> bool {
    word == cue
        || (word.len() >= 4 && cue.len() >= 4 && (word.starts_with(cue) || cue.starts_with(word)))
}

/// The tools `request` points at, by name, or `None` when it points at none (every tool
/// is offered then). A URL in the request points at the tools that fetch. A cue that more
/// than half of the tools share (`file`) points at none of them.
pub(crate) fn route(request: &str, tools: &[Cues]) -> Option<BTreeSet<String>> {
    // Each word once: a long message of the same words costs what one of them does.
    let asked: BTreeSet<String> =
        words_of(request).filter(|w| !STOP.contains(&w.as_str())).collect();
    // How many tools each cue points at, counted once rather than per tool and cue.
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for cue in tools.iter().flat_map(|t| &t.words) {
        *counts.entry(cue).or_default() += 1;
    }
    let shared = |cue: &str| counts.get(cue).copied().unwrap_or(0) * 2 > tools.len();
    let url = !urls(request).is_empty();
    let chosen: BTreeSet<String> = tools
        .iter()
        .filter(|t| {
            (url && t.fetches)
                || t.words.iter().any(|cue| !shared(cue) && asked.iter().any(|w| same(w, cue)))
        })
        .map(|t| t.name.clone())
        .collect();
    (!chosen.is_empty()).then_some(chosen)
}

/// The most web addresses [`urls`] takes from one request: a pasted page of links is
/// not a list of pages to fetch, one a call.
const MAX_URLS: usize = 8;
/// The longest web address [`urls`] takes, in bytes: a longer one would be copied into
/// every result of the turn until it is fetched.
const MAX_URL_BYTES: usize = 2048;

/// The http and https URLs `request` gives, in order, each once, without the punctuation
/// that ends a sentence after them (`See https://example.org/a.`), at most [`MAX_URLS`]
/// of at most [`MAX_URL_BYTES`] each.
/// The owner's own words: what a small model is pointed at when no call of the turn has
/// fetched one yet (`Toolset::fetch_pointer`).
pub(crate) fn urls(request: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in request.split_whitespace() {
        let start = ["http://", "https://"].iter().filter_map(|s| word.find(s)).min();
        let Some(start) = start else { continue };
        let url = word[start..]
            .trim_end_matches(['.', ',', ';', ':', '!', '?', ')', '>', ']', '"', '\'']);
        let host = url.split_once("://").map_or("", |(_, rest)| rest);
        if host.is_empty() || url.len() > MAX_URL_BYTES || out.iter().any(|u| u == url) {
            continue;
        }
        out.push(url.to_owned());
        if out.len() == MAX_URLS {
            break;
        }
    }
    out
}

/// Whether `request` names a file or folder: a word with a `/` inside it
/// (`vendor/fastcount`), a name with a short extension (`README.md`, `lib.rs`), or one of
/// the names projects give files without one (`README`, `Makefile`). A small model's first
/// reply to such a request must call a tool: asked "How do I run the tests? See the
/// README.", the 0.5B model answered at once, with commands the README does not hold.
pub(crate) fn names_a_path(request: &str) -> bool {
    const BARE: &[&str] = &["readme", "makefile", "dockerfile", "license", "changelog"];
    request.split_whitespace().any(|word| {
        let word = word.trim_matches(|c: char| !c.is_alphanumeric() && c != '.' && c != '/');
        let word = word.trim_end_matches('.');
        let inner_slash = word.trim_matches('/').contains('/');
        let extension = word.rsplit_once('.').is_some_and(|(stem, ext)| {
            !stem.is_empty()
                && (1..=4).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
        });
        let url = word.contains("://");
        let bare = BARE.contains(&word.to_lowercase().as_str());
        !url && (inner_slash || extension || bare)
    })
}

/// Whether `request` asks after something the model can only know by looking: a
/// question (it ends with `?` or begins with a question word) or a request about the
/// owner's things (`my`), or one that begins with a verb of looking (`list`, `search`,
/// `remind`), with at least one word that is not a question's own ([`ASKING`], [`STOP`]).
/// A small model's first reply to it must call a tool: asked "Remind me of my ideas." or
/// "How is the project deployed?", the 0.5B model answered at once, from nothing. "Who
/// are you?", "what can you do" and "hello" may still be answered at once.
pub(crate) fn asks_after_something(request: &str) -> bool {
    const SMALL_TALK: &[&str] = &[
        "you", "your", "yourself", "me", "do", "hello", "hi", "thanks", "thank", "please", "is",
        "a", "an", "i",
    ];
    let words: Vec<String> = words_of(request).collect();
    let Some(first) = words.first() else { return false };
    let question = request.trim_end().ends_with('?') || QUESTION.contains(&first.as_str());
    let mine = words.iter().any(|w| w == "my" || w == "mine");
    let looking = LOOKING.contains(&first.as_str());
    let about_something = words.iter().any(|w| {
        !STOP.contains(&w.as_str())
            && !ASKING.contains(&w.as_str())
            && !QUESTION.contains(&w.as_str())
            && !SMALL_TALK.contains(&w.as_str())
            && w != "my"
    });
    (question || mine || looking) && about_something
}

/// Words that open a question.
const QUESTION: &[&str] = &[
    "what", "which", "where", "when", "who", "whom", "whose", "why", "how", "is", "are", "does",
    "do", "did", "can", "could", "should", "will",
];

/// Verbs of looking, that open a request to be shown something.
const LOOKING: &[&str] =
    &["list", "search", "find", "show", "read", "remind", "count", "check", "look", "open"];

/// Whether `request` only asks to be told or shown something: it opens as a question
/// (a question word, or its first sentence ends with `?`) or with a verb of looking
/// (`List my inbox.`), asks after something ([`asks_after_something`]), and asks for no
/// change ([`asks_for_a_change`]). Such a request is answered once the call a pointer
/// named has run (docs/agent.md#small-models); any other may go on to more calls.
pub(crate) fn only_asks(request: &str) -> bool {
    let first_sentence = request.split_inclusive(['.', '?', '!']).next().unwrap_or("");
    let opens = words_of(request)
        .next()
        .is_some_and(|w| QUESTION.contains(&w.as_str()) || LOOKING.contains(&w.as_str()));
    (opens || first_sentence.trim_end().ends_with('?'))
        && asks_after_something(request)
        && !asks_for_a_change(request)
}

/// Whether `request` asks for a change: a word of [`CHANGING`] in it (`Add 'book
/// flights' to my todo list.`, `note its time in notes/standup.md`, `check off milk`),
/// or `tell` to someone other than the one asking (`tell Ana yes`; not `tell me`). It
/// errs towards a change: taken for one, a question only gets no forced answer.
pub(crate) fn asks_for_a_change(request: &str) -> bool {
    let words: Vec<String> = words_of(request).collect();
    words.iter().enumerate().any(|(i, w)| {
        CHANGING.contains(&w.as_str())
            || (w == "tell" && words.get(i + 1).is_none_or(|next| next != "me" && next != "us"))
    })
}

/// Verbs of changing things, as an owner writes them, and `off` (`tick off`, `check
/// off`, `cross off`).
#[rustfmt::skip]
const CHANGING: &[&str] = &[
    "add", "added", "answer", "append", "archive", "book", "bump", "cancel", "change",
    "clear", "complete", "copy", "create", "cross", "delete", "document", "draft", "edit",
    "email", "finish", "fix", "forward", "insert", "keep", "make", "mark", "move", "note",
    "off", "post", "put", "record", "remember", "remove", "rename", "replace", "reply",
    "rewrite", "save", "schedule", "send", "set", "start", "summarise", "summarize", "tick",
    "translate", "update", "updated", "write",
];

/// Words of a request that point at no file: [`STOP`] and the short ones of questions.
const ASKING: &[&str] = &[
    "and", "any", "anything", "are", "can", "does", "file", "files", "find", "folder", "for",
    "give", "has", "have", "how", "list", "look", "many", "much", "read", "show", "some", "tell",
    "the", "was", "were", "who", "why", "you",
];

/// Whether a request's word and a part of a file's name are the same word: equal (three
/// letters or more), or the same in their first five letters (`grocery`, `groceries`).
fn kin(word: &str, part: &str) -> bool {
    let common = word.chars().zip(part.chars()).take_while(|(a, b)| a == b).count();
    (word == part && word.chars().count() >= 3) || common >= 5
}

/// The entry of a listing that the owner's `request` points at: the one whose name (its
/// last component, split into words) shares the most words with the request, files before
/// folders at the same count, then the first listed. Hidden entries (`.local`) are passed
/// over. `entries` are `(path, is a folder)`; `None` when the request points at none.
pub(crate) fn pointed<'a>(
    request: &str,
    entries: &'a [(String, bool)],
) -> Option<&'a (String, bool)> {
    let asked: BTreeSet<String> = words_of(request)
        .filter(|w| !STOP.contains(&w.as_str()) && !ASKING.contains(&w.as_str()))
        .collect();
    let mut best: Option<(usize, bool, &(String, bool))> = None;
    for entry in entries {
        let name = entry.0.rsplit('/').next().unwrap_or(&entry.0);
        if name.starts_with('.') {
            continue;
        }
        let parts: BTreeSet<String> = words_of(name).collect();
        let score = asked.iter().filter(|w| parts.iter().any(|p| kin(w, p))).count();
        let better = match best {
            None => score > 0,
            Some((s, dir, _)) => score > s || (score == s && dir && !entry.1),
        };
        if better {
            best = Some((score, entry.1, entry));
        }
    }
    best.map(|(_, _, entry)| entry)
}

/// The first name the owner's `request` gives, in lower case: a word of letters that
/// begins with a capital and goes on in lower case, and is not the first of its sentence
/// ("Luis" of "What is Luis's phone number?"; not `README` or `TODOs`, which the 0.5B
/// model then searched for as `todos` and found nothing). It is what a search should look
/// for when no entry of a listing is named after it; a lower-case pattern matches either
/// case in the tool that searches (fs.search is smart-case).
pub(crate) fn a_name(request: &str) -> Option<String> {
    // Longer than any name: the owner's pasted text, not a name to search for.
    const MAX_NAME: usize = 40;
    let mut sentence_start = true;
    for raw in request.split_whitespace() {
        let word = raw.trim_start_matches(|c: char| !c.is_alphanumeric());
        let word = word.split(|c: char| !c.is_alphabetic()).next().unwrap_or("");
        let mut letters = word.chars();
        let capital = letters.next().is_some_and(char::is_uppercase)
            && letters.next().is_some_and(char::is_lowercase)
            && word.chars().count() <= MAX_NAME;
        if capital && !sentence_start && !raw.contains("://") {
            return Some(word.to_lowercase());
        }
        sentence_start = raw.ends_with(['.', '?', '!', ':']);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str, fetches: bool) -> Cues {
        let def = ToolDef {
            name: name.into(),
            description: description.into(),
            parameters: serde_json::json!({}),
        };
        Cues::of(&def, fetches)
    }

    fn tools() -> Vec<Cues> {
        vec![
            tool("fs.list", "List a directory. depth > 1 recurses.", false),
            tool("fs.read", "Read a text file. Use offset and limit to page.", false),
            tool("fs.search", "Search files under a directory for a regular expression.", false),
            tool("fs.write", "Write a text file.", false),
            tool("http.fetch", "Send an HTTP request and return its body.", true),
        ]
    }

    fn names(request: &str) -> Option<Vec<String>> {
        route(request, &tools()).map(|s| s.into_iter().collect())
    }

    #[test]
    fn a_request_gets_the_tools_its_words_point_at_and_every_tool_when_none() {
        assert_eq!(names("List my inbox."), Some(vec!["fs.list".into()]));
        assert_eq!(
            names("Show me notes/reading-list.md"),
            Some(vec!["fs.list".into(), "fs.read".into()])
        );
        assert_eq!(names("Search my notes for the topic"), Some(vec!["fs.search".into()]));
        assert_eq!(
            names("What does Foo cost? https://example.org/pricing"),
            Some(vec!["http.fetch".into()])
        );
        // Stop words point at nothing.
        assert_eq!(names("What is there about it?"), None);
        assert_eq!(names("Remind me of my ideas."), None);
        // A long message of the same words: the same tools as one of them.
        assert_eq!(names(&"List my inbox. ".repeat(100_000)), names("List my inbox."));
        // The same request, the same tools.
        assert_eq!(names("List my inbox."), names("List my inbox."));
    }

    #[test]
    fn the_web_addresses_of_a_request_are_taken_in_order_once_without_the_full_stop() {
        assert_eq!(
            urls(
                "Is Foo up? http://h:1/status and (https://h:1/changelog). Again: http://h:1/status"
            ),
            vec!["http://h:1/status".to_owned(), "https://h:1/changelog".to_owned()]
        );
        assert_eq!(
            urls("See <https://example.org/a>, then http://"),
            vec!["https://example.org/a".to_owned()]
        );
        assert!(urls("no address here, nor in ftp://x").is_empty());
        // A link written in Markdown, and one quoted.
        assert_eq!(
            urls("See [the page](https://h/p), or 'http://h/q'."),
            vec!["https://h/p".to_owned(), "http://h/q".to_owned()]
        );
        let many: String = (0..100).map(|i| format!("http://h/{i} ")).collect();
        assert_eq!(urls(&many).len(), MAX_URLS);
        let long = format!("http://h/{}", "a".repeat(MAX_URL_BYTES));
        assert_eq!(urls(&format!("{long} http://h/b")), vec!["http://h/b".to_owned()]);
    }

    #[test]
    fn a_request_that_names_a_file_or_folder_is_told_from_one_that_does_not() {
        for named in [
            "How do I run the tests? See the README.",
            "Show me vendor/fastcount/src/lib.rs.",
            "What is the invoice in downloads/invoice.txt about?",
            "read README.md and tell me what bx is",
            "how many lines does Makefile have",
            "What did Ana ask me? It is in messages/inbox/001-ana.txt.",
        ] {
            assert!(names_a_path(named), "{named}");
        }
        for not in [
            "List my inbox.",
            "What is Ana's email address?",
            "Remind me of my ideas.",
            "list the files here",
            "What is on my todo list?",
            "It costs 3.50 or 4.5.",
            "What does https://example.org/pricing say?",
        ] {
            assert!(!names_a_path(not), "{not}");
        }
    }

    #[test]
    fn a_request_that_asks_after_something_is_told_from_small_talk() {
        for asking in [
            "Remind me of my ideas.",
            "How is the project deployed?",
            "What is Ana's email address?",
            "List my inbox.",
            "Search my notes for the research topic.",
            "list the files here",
            "Which notes do I have?",
        ] {
            assert!(asks_after_something(asking), "{asking}");
        }
        for not in ["hello", "Who are you?", "what can you do", "thanks!", "", "Hi, how are you?"] {
            assert!(!asks_after_something(not), "{not}");
        }
    }

    #[test]
    fn a_request_that_asks_for_a_change_is_told_from_a_question() {
        for change in [
            "Add 'book flights' to my todo list.",
            "Read Ana's message and reply yes in messages/outbox/to-ana.txt.",
            "Make three notes: notes/mon.md, notes/tue.md and notes/wed.md.",
            "Mark 'renew passport' as done in my todo list.",
        ] {
            assert!(asks_for_a_change(change), "{change}");
        }
        for question in [
            "List my inbox.",
            "How do I run the tests? See the README.",
            "Search my notes for the research topic.",
            "Remind me of my ideas.",
            "Read README.md and tell me what bx is.",
        ] {
            assert!(!asks_for_a_change(question), "{question}");
            assert!(only_asks(question), "{question}");
        }
        for change in [
            "Check off 'milk' on my todo list.",
            "Check my inbox and tell Ana yes.",
            "Forward Ana's mail to Bob.",
            "Answer Ana: yes.",
            "Please get it updated.",
        ] {
            assert!(asks_for_a_change(change), "{change}");
            assert!(!only_asks(change), "{change}");
        }
        // Only a request that opens as a question or a look, not one about the owner's
        // things alone.
        assert!(!only_asks("Ana's mail goes to my boss now."));
        assert!(!only_asks("hello"));
    }

    #[test]
    fn a_name_is_the_first_capitalised_word_past_a_sentence_start() {
        for (request, name) in [
            ("What is Luis's phone number? It is in docs.", Some("luis")),
            ("What is Ana's email address?", Some("ana")),
            ("When does Ana arrive? Ask Luis.", Some("ana")),
            ("Read the README and tell me what bx is.", None),
            ("Find the TODOs in the sources.", None),
            ("Remind me of my ideas.", None),
            ("What is new in the latest release? http://Example.org/Changelog", None),
            ("How do I run the tests? See the README, Bob.", Some("bob")),
            ("", None),
        ] {
            assert_eq!(a_name(request).as_deref(), name, "{request}");
        }
        // A name is at most 40 letters; a longer word is no name, and no search's pattern.
        let word = |n: usize| format!("L{}", "u".repeat(n - 1));
        let asked = |n: usize| a_name(&format!("What is {}'s number?", word(n)));
        assert_eq!(asked(40), Some(word(40).to_lowercase()));
        assert_eq!(asked(41), None);
    }

    #[test]
    fn a_listing_entry_is_pointed_at_by_the_words_of_its_name() {
        let entries: Vec<(String, bool)> = [
            (".local", true),
            ("contacts.json", false),
            ("messages", true),
            ("messages/inbox", true),
            ("messages/outbox", true),
            ("notes", true),
            ("notes/groceries.md", false),
            ("notes/ideas.md", false),
        ]
        .iter()
        .map(|(p, d)| ((*p).to_owned(), *d))
        .collect();
        let at = |request: &str| pointed(request, &entries).map(|e| e.0.as_str());
        assert_eq!(at("List my inbox."), Some("messages/inbox"));
        assert_eq!(at("What is on my grocery list?"), Some("notes/groceries.md"));
        assert_eq!(at("Which notes do I have?"), Some("notes"));
        assert_eq!(at("Remind me of my ideas."), Some("notes/ideas.md"));
        assert_eq!(at("Is anything waiting in my outbox?"), Some("messages/outbox"));
        // Words of asking, and hidden entries, point at nothing.
        assert_eq!(at("What files are in the folder?"), None);
        assert_eq!(at("Show the local state"), None);
        // A file before a folder at the same count.
        let both = vec![("ideas".to_owned(), true), ("ideas.md".to_owned(), false)];
        assert_eq!(pointed("my ideas", &both).map(|e| e.0.as_str()), Some("ideas.md"));
    }
}
