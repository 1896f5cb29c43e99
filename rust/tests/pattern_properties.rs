//! Arbitrary input for the pattern replacer: any pattern compiles or gives a `CoreError`, any
//! text gives a result, never a panic; whole-match rules agree with the `regex` crate's own
//! replacement, and rules standing in for look-around agree with a direct scan of the text.

use memstrata::patterns::{Replacer, RuleSpec};
use memstrata::CoreError;
use proptest::prelude::*;
use regex::{NoExpand, Regex};

/// Rules shaped like the redaction rules: contexts, kept prefixes, an `after` that is read
/// backwards over a long tail, requirements, case folding and literals in many scripts.
fn redaction_like() -> Replacer {
    let rule =
        |pattern: &str, before: Option<&str>, after: Option<&str>, requires: &[&str]| RuleSpec {
            pattern: pattern.into(),
            replacement: "[x]".into(),
            before: before.map(Into::into),
            after: after.map(Into::into),
            requires: requires.iter().map(|r| (*r).into()).collect(),
        };
    Replacer::new(&[
        rule(r"-----BEGIN(?s:.)*?(?:-----END|\z)", None, None, &[]),
        rule(
            r"(?-u:\b)[Bb]earer[ \t]{1,16}[A-Za-z0-9+/]{4,}",
            Some(r"(?-u:\b)[Bb]earer[ \t]{1,16}"),
            None,
            &[],
        ),
        rule(
            r"(?:^|[^A-Za-z0-9])[A-Za-z0-9]{8}(?:$|[^A-Za-z0-9])",
            Some(r"(?:^|[^A-Za-z0-9])"),
            Some(r"(?:$|[^A-Za-z0-9])"),
            &["[A-Z]", "[0-9]"],
        ),
        rule(
            r"(?:^|[^a-z])[a-z]{1,8}://[^\s]*",
            Some(r"(?:^|[^a-z])[a-z]{1,8}://[^:/@\s]*:"),
            Some(r"@(?:/@|[^@\s])*"),
            &[r"[^/]\z"],
        ),
        rule(
            r#"(?i)(?:secret|пароль|密码)[ \t]*[:=][ \t]*"?[^\s"]{3,}"#,
            Some(r#"(?i)(?:secret|пароль|密码)[ \t]*[:=][ \t]*"?"#),
            None,
            &[],
        ),
        rule(r"é+|\x{1F600}+|\n\n+", None, None, &[]),
    ])
    .unwrap()
}

fn text() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9 :=@/\"\\n\\t.-]{0,40}",
        prop::sample::select(vec![
            "-----BEGIN ",
            "-----END",
            "Bearer ",
            "bearer\t",
            "x://",
            "u:",
            "p@",
            "/@",
            "@",
            "SECRET=",
            "пароль: ",
            "密码=",
            "\"",
            "é",
            "😀",
            "\n\n",
            "Abc12345",
            "abcdefgh",
            "AKIAAAAA",
            " ",
        ])
        .prop_map(String::from),
    ];
    prop::collection::vec(pieces, 0..24).prop_map(|v| v.concat())
}

/// A pattern from regex-like pieces: often valid, sometimes not.
fn pattern() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "a",
        "b",
        "é",
        ".",
        "\\d",
        "\\w",
        "\\s",
        "[a-c]",
        "[^x]",
        "(?-u:\\b)",
        "\\b",
        "^",
        "$",
        "*",
        "+",
        "?",
        "{2}",
        "{1,3}",
        "(",
        ")",
        "(?:",
        "|",
        "(?i)",
        "\\",
        "[",
        "]",
        "--",
        "&&",
        "\\x{1F600}",
        "(?s:.)",
        "*?",
    ]);
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_text_is_rewritten_without_panicking(text in text()) {
        let (out, n) = redaction_like().replace(&text);
        if n == 0 {
            prop_assert_eq!(out.as_ref(), text.as_str());
        } else {
            // Later rules see earlier replacements and may take them in (a secret's value can
            // be a redacted key), so only the last replacement is sure to show.
            prop_assert!(out.contains("[x]"));
        }
    }

    #[test]
    fn any_pattern_compiles_or_is_refused(
        main in pattern(),
        before in prop::option::of(pattern()),
        after in prop::option::of(pattern()),
        requires in prop::collection::vec(pattern(), 0..2),
        text in text(),
    ) {
        let spec = RuleSpec { pattern: main, replacement: "-".into(), before, after, requires };
        match Replacer::new(&[spec]) {
            Ok(replacer) => {
                let (out, n) = replacer.replace(&text);
                prop_assert!(n <= text.len() + 1);
                prop_assert!(n > 0 || out == text);
            }
            Err(CoreError::InvalidArgument(message)) => {
                prop_assert!(message.starts_with("rules[0]."), "{}", message);
            }
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
        }
    }

    #[test]
    fn whole_match_rules_agree_with_the_regex_crate(
        index in 0usize..6,
        text in text(),
    ) {
        // Patterns that cannot match the empty string, where the two must agree exactly.
        let pattern = [
            r"[a-z]{3,}", r"(?i)bearer\s+\S+", r"@[^@]*", r"\d+|é+", r"(?s:.)", r"-----BEGIN(?s:.)*?-----END",
        ][index];
        let regex = Regex::new(pattern).unwrap();
        let expected = regex.replace_all(&text, NoExpand("<>"));
        let (out, n) = Replacer::new(&[RuleSpec::new(pattern, "<>")]).unwrap().replace(&text);
        prop_assert_eq!(out.as_ref(), expected.as_ref());
        prop_assert_eq!(n, regex.find_iter(&text).count());
    }

    #[test]
    fn contexts_stand_in_for_look_around(text in "[abcd ]{0,60}") {
        // Every maximal run of a-c three long or more, whatever touches it.
        let rule = RuleSpec {
            pattern: "(?:^|[^a-c])[a-c]{3,}(?:$|[^a-c])".into(),
            replacement: "#".into(),
            before: Some("(?:^|[^a-c])".into()),
            after: Some("(?:$|[^a-c])".into()),
            requires: Vec::new(),
        };
        let (out, n) = Replacer::new(&[rule]).unwrap().replace(&text);
        let mut expected = String::new();
        let mut runs = 0;
        let mut run = String::new();
        for c in text.chars().chain(std::iter::once('\0')) {
            if ('a'..='c').contains(&c) {
                run.push(c);
                continue;
            }
            if run.len() >= 3 {
                expected.push('#');
                runs += 1;
            } else {
                expected.push_str(&run);
            }
            run.clear();
            if c != '\0' {
                expected.push(c);
            }
        }
        prop_assert_eq!(out.as_ref(), expected.as_str());
        prop_assert_eq!(n, runs);
    }
}
