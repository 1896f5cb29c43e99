//! Arbitrary input for the sliding-window prune and the hashing embedder: any template, any
//! message shape, any text and dimension gives a result or a `CoreError`, never a panic, and the
//! results keep their documented invariants (the prune is idempotent and only touches old tool
//! messages; embeddings are deterministic, finite, and unit length or zero).

use memstrata::embed::{hash_embed, MAX_DIM};
use memstrata::prune::{keep_recent, plan, Message, Placeholder, CALL_ID, DEFAULT_PLACEHOLDER};
use memstrata::CoreError;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Shape {
    Other,
    Tool {
        call_id: String,
        content: Option<String>,
    },
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        1 => Just(Shape::Other),
        3 => (any::<String>(), prop::option::of(any::<String>()))
            .prop_map(|(call_id, content)| Shape::Tool { call_id, content }),
        // A message that already looks like a placeholder, for a call id or for another one.
        1 => "[a-z]{0,4}".prop_map(|id| Shape::Tool {
            content: Some(DEFAULT_PLACEHOLDER.replace(CALL_ID, &id)),
            call_id: id,
        }),
    ]
}

fn view(shapes: &[Shape]) -> Vec<Message<'_>> {
    shapes
        .iter()
        .map(|s| match s {
            Shape::Other => Message::Other,
            Shape::Tool { call_id, content } => Message::Tool {
                call_id,
                content: content.as_deref(),
            },
        })
        .collect()
}

fn template() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(DEFAULT_PLACEHOLDER.to_owned()),
        any::<String>(),
        (any::<String>(), any::<String>()).prop_map(|(a, b)| format!("{a}{CALL_ID}{b}{CALL_ID}")),
        "[{}a-z_]{0,20}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn placeholders_parse_or_name_the_marker(template in template(), id in any::<String>()) {
        match Placeholder::parse(&template) {
            Ok(p) => {
                prop_assert!(template.contains(CALL_ID));
                prop_assert_eq!(p.render(&id), template.replace(CALL_ID, &id));
            }
            Err(CoreError::InvalidArgument(message)) => {
                prop_assert!(!template.contains(CALL_ID));
                prop_assert!(message.contains(CALL_ID));
            }
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
    }

    #[test]
    fn the_prune_touches_only_old_tool_messages_and_is_idempotent(
        shapes in prop::collection::vec(shape(), 0..24),
        window in -5i64..30,
        template in template(),
    ) {
        let Ok(window) = keep_recent(window) else {
            prop_assert!(window < 0);
            return Ok(());
        };
        let Ok(placeholder) = Placeholder::parse(&template) else {
            return Ok(());
        };
        let messages = view(&shapes);
        let rewrites = plan(&messages, window, &placeholder);
        let tools: Vec<usize> = shapes
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Shape::Tool { .. }))
            .map(|(i, _)| i)
            .collect();
        let old = &tools[..tools.len().saturating_sub(window)];
        for (index, content) in &rewrites {
            prop_assert!(old.contains(index), "message {} is not an old tool message", index);
            let Shape::Tool { call_id, .. } = &shapes[*index] else { unreachable!() };
            prop_assert_eq!(content, &placeholder.render(call_id));
        }
        // Applying the plan and pruning again changes nothing.
        let mut after = shapes.clone();
        for (index, content) in rewrites {
            if let Shape::Tool { content: c, .. } = &mut after[index] {
                *c = Some(content);
            }
        }
        prop_assert!(plan(&view(&after), window, &placeholder).is_empty());
    }

    #[test]
    fn hash_embed_is_deterministic_finite_and_unit_or_zero(
        texts in prop::collection::vec(any::<String>(), 0..8),
        dim in prop_oneof![0usize..600, Just(MAX_DIM), Just(MAX_DIM + 1), Just(usize::MAX)],
    ) {
        let out = match hash_embed(&texts, dim) {
            Ok(out) => out,
            Err(CoreError::InvalidArgument(message)) => {
                prop_assert!(dim == 0 || dim > MAX_DIM);
                prop_assert!(message.contains("dim"));
                return Ok(());
            }
            Err(other) => return Err(TestCaseError::fail(format!("{other}"))),
        };
        prop_assert_eq!(out.len(), texts.len() * dim);
        prop_assert_eq!(&out, &hash_embed(&texts, dim).unwrap());
        for (row, text) in out.chunks(dim).zip(&texts) {
            prop_assert!(row.iter().all(|x| x.is_finite()));
            let norm: f64 = row.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
            prop_assert!(norm == 0.0 || (norm - 1.0).abs() < 1e-4, "norm {} for {:?}", norm, text);
            // A text with no word has no direction. (A text with words can still cancel out to
            // zero in a tiny dimension, so the converse is not a property.)
            let has_word = text
                .chars()
                .any(|c| !(c.is_whitespace() || c.is_ascii_punctuation() || "‘’“”–—…«»".contains(c)));
            prop_assert!(has_word || norm == 0.0, "{:?}", text);
        }
    }
}

#[test]
fn hash_embed_handles_one_enormous_word_and_many_texts() {
    let word = "x".repeat(200_000);
    let out = hash_embed(&[word.as_str()], 64).unwrap();
    let norm: f32 = out.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4);
    // Enough texts for the parallel path, which must give the serial path's rows.
    let texts: Vec<String> = (0..200)
        .map(|i| format!("text number {i} 東京 🚀"))
        .collect();
    let together = hash_embed(&texts, 32).unwrap();
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(
            &together[i * 32..(i + 1) * 32],
            &hash_embed(&[text], 32).unwrap()[..]
        );
    }
}
