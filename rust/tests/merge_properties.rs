//! Arbitrary input for the merge kernels: `merge_values`, `merge_json`, `strip_in_place` and
//! the depth pre-scan must answer every input with a value or a `CoreError`, never a panic or a
//! stack overflow, and whatever they return holds no unsafe key at any depth.

use memstrata::merge::scan::nesting_depth;
use memstrata::merge::value::{json_equal, json_hash, merge_json, merge_values, strip_in_place};
use memstrata::merge::{ArrayMode, MergeOptions, NullMode, UnsafeKeys, MAX_DEPTH};
use memstrata::CoreError;
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Keys a model sends to pollute a prototype, mixed into every generated object.
const NASTY_KEYS: [&str; 4] = ["__proto__", "constructor", "prototype", "__proto__ "];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z]{0,6}",
        1 => any::<String>(),
        2 => proptest::sample::select(NASTY_KEYS.to_vec()).prop_map(str::to_owned),
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Non-finite floats become null in serde_json, as JSON has no way to write them.
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn options() -> impl Strategy<Value = MergeOptions> {
    (
        prop_oneof![Just(ArrayMode::Replace), Just(ArrayMode::Union)],
        prop_oneof![
            Just(NullMode::Keep),
            Just(NullMode::Delete),
            Just(NullMode::Ignore)
        ],
        prop::collection::vec(key(), 0..3),
    )
        .prop_map(|(arrays, nulls, extra)| MergeOptions {
            arrays,
            nulls,
            unsafe_keys: UnsafeKeys::new(
                ["__proto__", "constructor"]
                    .into_iter()
                    .chain(extra.iter().map(String::as_str)),
            ),
        })
}

/// The first unsafe key found at any depth, with its depth.
fn find_unsafe(value: &Value, keys: &UnsafeKeys, depth: usize) -> Option<(String, usize)> {
    match value {
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            if keys.contains(k) {
                Some((k.clone(), depth))
            } else {
                find_unsafe(v, keys, depth + 1)
            }
        }),
        Value::Array(items) => items.iter().find_map(|v| find_unsafe(v, keys, depth + 1)),
        _ => None,
    }
}

fn stripped(mut value: Value, keys: &UnsafeKeys) -> Value {
    strip_in_place(&mut value, keys, 0).expect("generated values are shallow");
    value
}

/// `depth` levels of `{"k": [ ... ]}` alternating objects and arrays, with an unsafe key at the
/// bottom. Built in a loop: a recursive builder would be what overflows.
fn nested(depth: usize, unsafe_key: &str) -> Value {
    let mut bottom = Map::new();
    bottom.insert(unsafe_key.to_owned(), Value::from(1));
    bottom.insert("ok".to_owned(), Value::from(2));
    let mut value = Value::Object(bottom);
    for level in 1..depth {
        value = if level % 2 == 1 {
            Value::Array(vec![value])
        } else {
            let mut map = Map::new();
            map.insert("k".to_owned(), value);
            Value::Object(map)
        };
    }
    value
}

/// Debug builds use large frames; the library parses deep text on its own big-stack thread,
/// and the tests walk deep values on one too.
fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn_scoped(s, f)
            .unwrap()
            .join()
            .unwrap()
    })
}

/// Drops a deep value iteratively: serde_json's own drop recurses once per level.
fn dismantle(value: Value) {
    let mut pending = vec![value];
    while let Some(v) = pending.pop() {
        match v {
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => pending.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn merge_values_never_panics_and_leaves_no_unsafe_key(
        base in json_value(), patch in json_value(), o in options()
    ) {
        // The base is trusted (a stored state, already stripped); the patch is not.
        let base = stripped(base, &o.unsafe_keys);
        let merged = merge_values(base.clone(), patch.clone(), &o).unwrap();
        prop_assert_eq!(find_unsafe(&merged, &o.unsafe_keys, 0), None);
        // A non-object patch replaces; an object patch keeps the base's untouched keys.
        if let (Value::Object(b), Value::Object(p), Value::Object(m)) = (&base, &patch, &merged) {
            for (k, v) in b {
                if !p.contains_key(k) {
                    prop_assert_eq!(m.get(k), Some(v));
                }
            }
        }
    }

    #[test]
    fn merging_an_empty_object_changes_nothing(base in json_value(), o in options()) {
        let base = stripped(base, &o.unsafe_keys);
        let merged = merge_values(base.clone(), Value::Object(Map::new()), &o).unwrap();
        if base.is_object() {
            prop_assert_eq!(merged, base);
        } else {
            prop_assert_eq!(merged, Value::Object(Map::new()));
        }
    }

    #[test]
    fn merge_json_agrees_with_merge_values(
        base in json_value(), patch in json_value(), o in options()
    ) {
        let text = |v: &Value| serde_json::to_vec(v).unwrap();
        let out = merge_json(&text(&base), &text(&patch), &o).unwrap();
        let parsed: Value = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(find_unsafe(&parsed, &o.unsafe_keys, 0), None);
        // Through text, floats round-trip exactly (float_roundtrip) and NaN was already null.
        let reparse = |v: &Value| serde_json::from_slice::<Value>(&text(v)).unwrap();
        let expected = merge_values(
            stripped(reparse(&base), &o.unsafe_keys), reparse(&patch), &o,
        ).unwrap();
        prop_assert_eq!(parsed, expected);
    }

    #[test]
    fn merge_json_answers_arbitrary_bytes_with_a_result_or_an_error(
        base in prop::collection::vec(any::<u8>(), 0..200),
        patch in prop::collection::vec(any::<u8>(), 0..200),
        o in options(),
    ) {
        match merge_json(&base, &patch, &o) {
            Ok(out) => {
                let parsed: Value = serde_json::from_slice(&out).unwrap();
                prop_assert_eq!(find_unsafe(&parsed, &o.unsafe_keys, 0), None);
            }
            Err(CoreError::InvalidJson { what, .. }) => {
                prop_assert!(what == "base" || what == "patch");
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }

    #[test]
    fn merge_json_answers_json_shaped_garbage(
        pieces in prop::collection::vec(
            prop::sample::select(vec![
                "{", "}", "[", "]", ",", ":", "\"", "\\", "\"__proto__\"", "\"k\"", "1",
                "-0.5e309", "NaN", "Infinity", "null", "\"\\ud800\"", "\u{0}", " ", "\u{feff}",
            ]),
            0..400,
        ),
        o in options(),
    ) {
        let text = pieces.concat();
        let result = merge_json(text.as_bytes(), b"{}", &o);
        if let Ok(out) = result {
            let parsed: Value = serde_json::from_slice(&out).unwrap();
            prop_assert_eq!(find_unsafe(&parsed, &o.unsafe_keys, 0), None);
        }
        // The scan must never panic either, whatever the brackets and quotes do.
        let _ = nesting_depth(text.as_bytes());
    }

    #[test]
    fn strip_removes_every_unsafe_key_and_is_idempotent(
        value in json_value(), o in options()
    ) {
        let once = stripped(value, &o.unsafe_keys);
        prop_assert_eq!(find_unsafe(&once, &o.unsafe_keys, 0), None);
        prop_assert_eq!(stripped(once.clone(), &o.unsafe_keys), once);
    }

    #[test]
    fn equal_values_hash_equal(value in json_value()) {
        // A copy with every object's keys in reverse order is JSON-equal to the original.
        fn reversed(v: &Value) -> Value {
            match v {
                Value::Object(m) => Value::Object(
                    m.iter().rev().map(|(k, v)| (k.clone(), reversed(v))).collect(),
                ),
                Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
                other => other.clone(),
            }
        }
        let twin = reversed(&value);
        prop_assert!(json_equal(&value, &twin, 0).unwrap());
        prop_assert_eq!(json_hash(&value, 0).unwrap(), json_hash(&twin, 0).unwrap());
    }

    #[test]
    fn nesting_depth_of_arbitrary_bytes_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..2000)
    ) {
        match nesting_depth(&bytes) {
            Ok(depth) => prop_assert!(depth <= MAX_DEPTH),
            Err(CoreError::NestingTooDeep { limit, .. }) => prop_assert_eq!(limit, MAX_DEPTH),
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }
}

proptest! {
    // Each case builds and walks values up to thousands of levels deep: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn deep_values_merge_below_the_limit_and_are_refused_above(
        depth in 1usize..3000, patch_side in any::<bool>(), o in options()
    ) {
        // The levels are `{"k": ...}`: with "k" among the unsafe keys (a generated extra key
        // can be), stripping cuts the value at its first level, and any depth is accepted.
        prop_assume!(!o.unsafe_keys.contains("k"));
        let result = on_big_stack(|| {
            let deep = nested(depth, "__proto__");
            let empty = Value::Object(Map::new());
            if patch_side {
                return merge_values(empty, deep, &o);
            }
            // A deep base is stripped first, as a state loaded from a store is.
            let mut base = deep;
            if let Err(trace) = strip_in_place(&mut base, &o.unsafe_keys, 0) {
                dismantle(base);
                return Err(trace.into_core());
            }
            merge_values(base, empty, &o)
        });
        match result {
            Ok(merged) => {
                prop_assert!(depth <= MAX_DEPTH, "depth {} was accepted", depth);
                let found = on_big_stack(|| {
                    let found = find_unsafe(&merged, &o.unsafe_keys, 0);
                    dismantle(merged);
                    found
                });
                prop_assert_eq!(found, None);
            }
            Err(CoreError::NestingTooDeep { path, limit }) => {
                prop_assert!(depth > MAX_DEPTH, "depth {} was refused", depth);
                prop_assert_eq!(limit, MAX_DEPTH);
                prop_assert!(path.starts_with('$'), "{}", path);
            }
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
    }

    #[test]
    fn deep_text_is_refused_with_the_limit(
        depth in (MAX_DEPTH + 1)..200_000usize,
        open in prop::sample::select(vec!["[", "{\"a\":", "{\"__proto__\":"]),
        closed in any::<bool>(),
    ) {
        let mut text = open.repeat(depth);
        text.push('1');
        if closed {
            for _ in 0..depth {
                text.push(if open == "[" { ']' } else { '}' });
            }
        }
        let o = MergeOptions::default();
        match merge_json(b"{}", text.as_bytes(), &o) {
            Err(CoreError::NestingTooDeep { limit, .. }) => prop_assert_eq!(limit, MAX_DEPTH),
            other => prop_assert!(false, "depth {depth}: {other:?}"),
        }
    }
}

#[test]
fn unsafe_keys_at_every_depth_up_to_the_limit_are_stripped() {
    on_big_stack(|| {
        let o = MergeOptions::default();
        for depth in (1..=MAX_DEPTH).step_by(37).chain([MAX_DEPTH]) {
            for key in ["__proto__", "constructor"] {
                let merged = merge_values(Value::Object(Map::new()), nested(depth, key), &o)
                    .unwrap_or_else(|e| panic!("depth {depth}: {e}"));
                assert_eq!(
                    find_unsafe(&merged, &o.unsafe_keys, 0),
                    None,
                    "depth {depth}"
                );
                let mut stripped = nested(depth, key);
                strip_in_place(&mut stripped, &o.unsafe_keys, 0).unwrap();
                assert_eq!(find_unsafe(&stripped, &o.unsafe_keys, 0), None);
                dismantle(merged);
                dismantle(stripped);
            }
        }
    });
}
