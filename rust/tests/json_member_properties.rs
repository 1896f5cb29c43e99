//! `string_member` against a real JSON parser: whenever it offers a cut, parsing the rest gives
//! the parsed object without that key and the value is the key's string; for a plain string
//! member written once at the top of an object holding no number with an exponent or twenty
//! digits it always offers one; arbitrary bytes never panic it.

use memstrata::json_member::string_member;
use proptest::prelude::*;
use serde_json::{Map, Value};

const KEY: &str = "embedding";

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        // Strings that look like the structure around them.
        "[\"{}\\[\\],:\\\\ a-z]{0,8}".prop_map(Value::String),
        Just(Value::String(KEY.into())),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(
                (prop_oneof![Just(KEY.to_string()), "[a-z]{0,4}"], inner),
                0..5
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// `value` written with whitespace sprinkled between tokens (outside strings).
fn spaced(text: &str, spaces: &[u8]) -> String {
    let mut out = String::new();
    let (mut in_string, mut escaped, mut n) = (false, false, 0);
    for c in text.chars() {
        out.push(c);
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if c == '"' {
            in_string = true;
            continue;
        }
        if matches!(c, '{' | '}' | '[' | ']' | ',' | ':') {
            let pick = spaces[n % spaces.len()];
            n += 1;
            out.push_str([" ", "", "\n", "\t ", "", "\r\n"][usize::from(pick % 6)]);
        }
    }
    out
}

/// Whether the object holds, anywhere, a number written with an exponent or with twenty digits
/// or more (which the cut declines).
fn holds_an_unplain_number(object: &Map<String, Value>) -> bool {
    fn unplain(value: &Value) -> bool {
        match value {
            Value::Number(n) => {
                let written = n.to_string();
                written.contains(['e', 'E'])
                    || written.bytes().filter(u8::is_ascii_digit).count() >= 20
            }
            Value::Array(items) => items.iter().any(unplain),
            Value::Object(members) => members.values().any(unplain),
            _ => false,
        }
    }
    object.values().any(unplain)
}

fn cut(text: &str) -> Option<(Value, String)> {
    let member = string_member(text.as_bytes(), KEY.as_bytes())?;
    let rest = [&text[..member.cut.start], &text[member.cut.end..]].concat();
    let parsed = serde_json::from_str(&rest).expect("the rest of a valid object parses");
    Some((parsed, text[member.value].to_string()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn a_cut_leaves_the_object_without_the_member(
        pairs in prop::collection::vec(("[a-z]{0,4}", json_value()), 0..6),
        vector in prop::option::of("[A-Za-z0-9+/]{0,12}={0,2}"),
        at in any::<prop::sample::Index>(),
        spaces in prop::collection::vec(any::<u8>(), 1..16),
    ) {
        let mut object: Map<String, Value> = pairs.into_iter().collect();
        if let Some(v) = &vector {
            // Put the member anywhere among the others.
            let mut entries: Vec<(String, Value)> = object.into_iter().collect();
            entries.retain(|(k, _)| k != KEY);
            let spot = at.index(entries.len() + 1);
            entries.insert(spot, (KEY.to_string(), Value::String(v.clone())));
            object = entries.into_iter().collect();
        }
        let text = spaced(&serde_json::to_string(&Value::Object(object.clone())).unwrap(), &spaces);
        match (cut(&text), object.get(KEY)) {
            (Some((rest, value)), Some(Value::String(expected))) => {
                prop_assert_eq!(&value, expected);
                let mut without = object.clone();
                without.remove(KEY);
                prop_assert_eq!(rest, Value::Object(without));
            }
            (Some(_), other) => prop_assert!(false, "cut offered for {:?}", other),
            (None, Some(Value::String(s))) if vector.is_some() => {
                // Declined only where the documented conditions say so.
                prop_assert!(
                    s.contains('\\') || s.contains('"') || holds_an_unplain_number(&object),
                    "declined {}",
                    text
                );
            }
            (None, _) => {}
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = string_member(&bytes, KEY.as_bytes());
    }

    #[test]
    fn json_shaped_bytes_never_panic(text in "[{}\\[\\]\",:a-e\\\\ 0-9]{0,40}") {
        if let Some(member) = string_member(text.as_bytes(), b"e") {
            prop_assert!(member.cut.start <= member.cut.end && member.cut.end <= text.len());
            prop_assert!(member.value.start <= member.value.end);
        }
    }
}
