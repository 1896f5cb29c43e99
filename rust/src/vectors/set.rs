//! [`VectorSet`]: id-keyed unit vectors with exact top-k search.
//!
//! Next to each f32 unit vector the set keeps an int8 copy (one scale per row). A query is first
//! scored against the int8 copies, a quarter of the bytes, with AVX-512 VNNI where the CPU has
//! it and AVX2 otherwise (7-bit query codes there); the error of each approximate score is bounded per row (from the quantisation residuals
//! of the row and of the query, plus f32 rounding), so only rows whose upper bound reaches the
//! k-th best lower bound can be in the answer. Those few are re-scored in f32, and the result is
//! identical to an exhaustive f32 scan, ordering and tie-breaks included.
//!
//! A search can also rank by `weight · cosine + bias`, with one bias per row given at `add`
//! (recency and confidence, say): the bounds carry through the affine map, so a composite
//! ranking is as exact as a cosine one and reads no more bytes.

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;

use super::simd::{self, Level};
use super::topk::{KthLargest, TopK};
use super::{checked_norm, chunk_bounds, unit_query, PARALLEL_MIN_ELEMENTS};
use crate::{CoreError, CoreResult};

/// Below this many rows the int8 prefilter costs more than the f32 scan it saves.
const PREFILTER_MIN_ROWS: usize = 512;
/// Beyond this the int8 dot products could overflow i32.
const PREFILTER_MAX_DIM: usize = 16_384;
const INT8_BLOCK: usize = 256;
/// Width of a scoring stage: a staged scan scores this many columns of every row, then the next
/// stage only for the rows whose bound can still reach the floor.
const STAGE_COLUMNS: usize = 128;
/// The codes are stored in planes of this many columns, one per stage.
const PLANE_COLUMNS: usize = STAGE_COLUMNS;
/// A block is scored in stages only while the floor, less the block's mean bias, is at least
/// this fraction of the bound a typical row gets for its unscored columns (the weight times
/// `|q_B|` times the mean `|x_B|`): below it the first stage drops few rows and staging only
/// costs.
const STAGE_FLOOR_RATIO: f32 = 0.8;
/// Where the second cut may start a block's first stage too, the first cut does only from this
/// fraction: below it, the first cut kept most rows of the recall benchmark's high-bias blocks
/// where the second kept a few, and each row the first cut keeps reads two more planes, one row
/// at a time.
const EARLY_STAGE_FLOOR_RATIO: f32 = 1.2;
/// When a staged block's first stage keeps more than half its rows anyway (the rows share a
/// large score in their first columns, as high-bias rows do), staging waits until the floor,
/// less the block's mean bias, has risen this much above where it failed.
const STAGE_RETRY_RISE: f32 = 0.05;
/// The cuts a block's first stage may end at: the first, or the second.
const MAX_FIRST_CUTS: usize = 2;
/// The int8 pass reads ~60 GB/s on one core, so the wake-up cost of a second thread (see
/// `PARALLEL_MIN_ELEMENTS`) only pays off from about 8 MB of codes (20k rows at dim 384).
const PARALLEL_MIN_INT8_BYTES: usize = 1 << 23;

/// How far from 1 the norm of a shared row may be: a float32 vector normalised in float64 is
/// within a few ulps of it.
const SHARED_UNIT_TOLERANCE: f64 = 1e-4;

/// Rows of f32 values whose owner keeps them outside a [`VectorSet`]: a set given them with
/// [`VectorSet::add_shared`] reads them in place at each search rather than keep a copy.
pub trait SharedRows: Send + Sync + std::fmt::Debug {
    /// The rows, row-major. The values a set reads must not change while it holds them.
    fn values(&self) -> &[f32];
}

impl SharedRows for Vec<f32> {
    fn values(&self) -> &[f32] {
        self
    }
}

/// Where the unit vectors live.
#[derive(Debug, Clone)]
enum Units {
    /// The set's own copy, row-major, `dim` per row.
    Owned(Vec<f32>),
    /// Read in place: per slot, the source and the row in it.
    Shared {
        sources: Vec<Arc<dyn SharedRows>>,
        at: Vec<(u32, u32)>,
    },
}

/// A growable set of unit vectors keyed by string ids.
#[derive(Debug, Clone)]
pub struct VectorSet {
    dim: usize,
    ids: Vec<String>,
    slots: HashMap<String, usize>,
    /// The unit vectors: the set's own, or rows shared with their owner.
    unit: Units,
    /// `dim` rounded up to 64 bytes: one VNNI step.
    stride: usize,
    /// The int8 codes in column planes: plane `p` holds columns `128p..128p + 128` (the last
    /// one what is left of `stride`) of every row, rows back to back. A scan stage is one plane,
    /// and a full-width scan reads each plane as one contiguous stream: the hardware prefetcher
    /// follows that, where rows read a few lines at a time across the whole matrix stalled.
    planes: Vec<Vec<i8>>,
    code_sums: Vec<i32>,
    scales: Vec<f32>,
    /// `|v - scale·code|`: how far the int8 copy is from the unit vector.
    residuals: Vec<f32>,
    /// `|scale·code|`.
    code_norms: Vec<f32>,
    /// Column ends of the scoring stages before the full width: multiples of `STAGE_COLUMNS`
    /// below `stride`.
    cuts: Vec<usize>,
    /// Per cut, per row: the row's statistics over the columns before the cut.
    partials: Vec<Partial>,
    /// Added to each row's weighted similarity (zero unless given at `add`).
    biases: Vec<f32>,
    /// Σ biases, for their mean.
    bias_total: f64,
    /// The largest |bias| ever stored (only grows: it sizes a rounding margin).
    max_abs_bias: f32,
}

/// Per row, over columns `0..cut`: Σ code, `|v - scale·code|`, `|scale·code|`; and `|v|` over
/// the columns from the cut on (the Cauchy-Schwarz bound of what the later stages can add).
#[derive(Debug, Clone, Default)]
struct Partial {
    sums: Vec<i32>,
    residuals: Vec<f32>,
    norms: Vec<f32>,
    tails: Vec<f32>,
    /// Σ tails, for their mean.
    tail_total: f64,
}

impl Partial {
    fn set(&mut self, slot: usize, (sum, residual, norm, tail): (i32, f32, f32, f32)) {
        self.tail_total += f64::from(tail);
        if slot == self.sums.len() {
            self.sums.push(sum);
            self.residuals.push(residual);
            self.norms.push(norm);
            self.tails.push(tail);
        } else {
            self.tail_total -= f64::from(self.tails[slot]);
            self.sums[slot] = sum;
            self.residuals[slot] = residual;
            self.norms[slot] = norm;
            self.tails[slot] = tail;
        }
    }

    fn swap_remove(&mut self, slot: usize) {
        self.tail_total -= f64::from(self.tails[slot]);
        self.sums.swap_remove(slot);
        self.residuals.swap_remove(slot);
        self.norms.swap_remove(slot);
        self.tails.swap_remove(slot);
    }

    fn mean_tail(&self) -> f32 {
        if self.tails.is_empty() {
            0.0
        } else {
            (self.tail_total / self.tails.len() as f64) as f32
        }
    }
}

/// A row ready to store: its own unit vector (None: a shared row, read in place), its int8
/// codes, and its statistics per cut.
type Prepared = (Option<Vec<f32>>, Quantized, Vec<(i32, f32, f32, f32)>);

/// Rounded up so that bounds computed in f64 stay bounds after the cast to f32.
fn up(x: f64) -> f32 {
    (x.sqrt() * (1.0 + 1e-6)) as f32
}

/// Over columns `0..cut` of `v` and its codes: Σ code, `|v - scale·code|`, `|scale·code|`; and
/// `|v|` over the columns from `cut` on. Norms are rounded up.
fn partial_stats(v: &[f32], q: &Quantized, cut: usize) -> (i32, f32, f32, f32) {
    let head = cut.min(v.len());
    let codes = &q.codes[..head];
    let sum = codes.iter().map(|&c| i32::from(c)).sum();
    let squares: i32 = codes.iter().map(|&c| i32::from(c) * i32::from(c)).sum();
    let scale = f64::from(q.scale);
    let residual2: f64 = v[..head]
        .iter()
        .zip(codes)
        .map(|(&x, &c)| (f64::from(x) - scale * f64::from(c)).powi(2))
        .sum();
    let tail2: f64 = v[head..].iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    (
        sum,
        up(residual2),
        up(scale * scale * f64::from(squares)),
        up(tail2),
    )
}

/// The query as the int8 pass sees it.
struct Probe {
    /// Codes offset to unsigned by `offset` (see `Int8::query_max_code`).
    q_u8: Vec<u8>,
    offset: i32,
    scale: f32,
    /// `|q - scale·code|` and `|q|` over every column.
    residual: f32,
    norm: f32,
    /// Per cut: `|q|` and `|q - scale·code|` over the columns before it, `|q|` after it.
    partials: Vec<[f32; 3]>,
    /// Covers the f32 rounding of the cosines (see `search`).
    margin: f32,
    /// The similarity's weight in the score.
    weight: f32,
    /// Covers the f32 rounding of `weight * cosine + bias` (see `VectorSet::score_margin`).
    score_margin: f32,
}

/// Bit `i` set when `group[i] >= floor` (`group` holds at most 16 values). `AVX512` only where
/// the CPU has AVX-512.
#[inline(always)]
fn survivors<const AVX512: bool>(group: &[f32], floor: f32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if AVX512 {
        // SAFETY: only instantiated with `AVX512` inside the AVX-512 dispatch target.
        return unsafe { simd::ge_mask16_avx512(group, floor) };
    }
    if let Ok(full) = <&[f32; 16]>::try_from(group) {
        // A fixed 16-lane loop: one vector compare into a mask where the CPU has one.
        let mut mask = 0_u32;
        for (i, &u) in full.iter().enumerate() {
            mask |= u32::from(u >= floor) << i;
        }
        return mask;
    }
    group
        .iter()
        .enumerate()
        .fold(0, |mask, (i, &u)| mask | u32::from(u >= floor) << i)
}

/// The mean of `values` (not empty), summed in 16 independent lanes: a single running f32 sum
/// is one long dependency chain the compiler may not reorder.
#[inline(always)]
fn mean(values: &[f32]) -> f32 {
    let mut lanes = [0.0_f32; 16];
    let chunks = values.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += v;
        }
    }
    (lanes.iter().sum::<f32>() + tail) / values.len() as f32
}

/// A row's score: its weighted cosine (clamped to [-1, 1]) plus its bias, in one fixed order of
/// f32 operations wherever a score is computed.
#[inline]
fn composite(weight: f32, cosine: f32, bias: f32) -> f32 {
    weight * cosine.clamp(-1.0, 1.0) + bias
}
struct Quantized {
    codes: Vec<i8>,
    sum: i32,
    scale: f32,
    residual: f32,
    norm: f32,
}

/// Codes in `-max_code..=max_code`, scaled by the largest magnitude of `v`.
///
/// Written as independent lanes so it vectorises: it runs once per query, and a scalar pass in
/// f64 cost as much as scanning a thousand rows.
fn quantize(v: &[f32], stride: usize, max_code: i32) -> Quantized {
    const LANES: usize = 8;
    const ROUND: f32 = 12_582_912.0;
    let mut lane_max = [0.0_f32; LANES];
    let chunks = v.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, x) in lane_max.iter_mut().zip(chunk) {
            *m = m.max(x.abs());
        }
    }
    let max = tail
        .iter()
        .fold(lane_max.iter().fold(0.0_f32, |m, &x| m.max(x)), |m, x| {
            m.max(x.abs())
        });
    let scale = if max > 0.0 {
        max / max_code as f32
    } else {
        1.0
    };
    let (inverse, limit) = (1.0 / scale, max_code as f32);
    let mut codes = vec![0_i8; stride];
    for (c, &x) in codes.iter_mut().zip(v) {
        // Adding 1.5·2^23 rounds to the nearest integer, which then sits in the low mantissa
        // bits: integer arithmetic on the bits that vectorises, where `f32::round` is a libm
        // call on the x86_64 baseline and `as i8` a saturating conversion per element. Any
        // integer code is valid: the bounds use the actual one.
        let rounded = (x * inverse).clamp(-limit, limit) + ROUND;
        *c = (rounded.to_bits() as i32 - ROUND.to_bits() as i32) as i8;
    }
    // Σ code and Σ code² are exact integers (|code| <= 127, dim <= 65,536); the residual
    // |v - scale·code|² is summed in f64 over independent lanes.
    let sum: i32 = codes.iter().map(|&c| i32::from(c)).sum();
    let squares: i32 = codes.iter().map(|&c| i32::from(c) * i32::from(c)).sum();
    let mut res2 = [0.0_f64; LANES];
    let scale64 = f64::from(scale);
    // Over the vector's own columns: `codes` runs on to `stride` with zeros, and chunking it
    // whole would leave the last `dim % LANES` columns out of the tail (their residual, and so
    // the bound, went missing for every dim that is not a multiple of 8).
    let used = &codes[..v.len()];
    let (code_chunks, v_chunks) = (used.chunks_exact(LANES), v.chunks_exact(LANES));
    let (code_tail, v_tail) = (code_chunks.remainder(), v_chunks.remainder());
    for (cs, xs) in code_chunks.zip(v_chunks) {
        for ((r, &c), &x) in res2.iter_mut().zip(cs).zip(xs) {
            let d = f64::from(x) - scale64 * f64::from(c);
            *r += d * d;
        }
    }
    for ((r, &c), &x) in res2.iter_mut().zip(code_tail).zip(v_tail) {
        let d = f64::from(x) - scale64 * f64::from(c);
        *r += d * d;
    }
    Quantized {
        codes,
        sum,
        scale,
        residual: up(res2.iter().sum()),
        norm: up(scale64 * scale64 * f64::from(squares)),
    }
}

impl VectorSet {
    /// An empty set of `dim`-dimensional vectors.
    ///
    /// # Errors
    /// `InvalidArgument` unless `1 <= dim <= 65536`.
    pub fn new(dim: usize) -> CoreResult<Self> {
        if !(1..=65_536).contains(&dim) {
            return Err(CoreError::InvalidArgument(format!(
                "dim must be between 1 and 65536, got {dim}"
            )));
        }
        let stride = dim.div_ceil(64) * 64;
        let cuts: Vec<usize> = (1..)
            .map(|s| s * STAGE_COLUMNS)
            .take_while(|&c| c < stride)
            .collect();
        Ok(Self {
            dim,
            ids: Vec::new(),
            slots: HashMap::new(),
            unit: Units::Owned(Vec::new()),
            stride,
            planes: vec![Vec::new(); stride.div_ceil(PLANE_COLUMNS)],
            code_sums: Vec::new(),
            scales: Vec::new(),
            residuals: Vec::new(),
            code_norms: Vec::new(),
            partials: vec![Partial::default(); cuts.len()],
            cuts,
            biases: Vec::new(),
            bias_total: 0.0,
            max_abs_bias: 0.0,
        })
    }

    /// The columns plane `p` holds.
    fn plane_columns(&self, p: usize) -> std::ops::Range<usize> {
        p * PLANE_COLUMNS..((p + 1) * PLANE_COLUMNS).min(self.stride)
    }

    /// `out[i]` = the int8 dot product of `rows.row(i)` with the query over plane `p`.
    #[inline(always)]
    fn plane_dots<R: simd::Rows>(&self, p: usize, rows: R, q_u8: &[u8], out: &mut [i32]) {
        let cols = self.plane_columns(p);
        let width = cols.len();
        simd::i8_dot_rows(&self.planes[p], width, rows, 0..width, &q_u8[cols], out);
    }

    /// The unit vector in `slot`.
    #[inline(always)]
    fn row(&self, slot: usize) -> &[f32] {
        let d = self.dim;
        match &self.unit {
            Units::Owned(values) => &values[slot * d..(slot + 1) * d],
            Units::Shared { sources, at } => {
                let (source, row) = at[slot];
                let start = row as usize * d;
                &sources[source as usize].values()[start..start + d]
            }
        }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Whether the set reads its vectors in place from rows given to
    /// [`VectorSet::add_shared`] (it then keeps only the int8 codes and statistics).
    pub fn is_shared(&self) -> bool {
        matches!(self.unit, Units::Shared { .. })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.slots.contains_key(id)
    }

    /// Ids in storage order (which changes when ids are removed).
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Adds `ids[i]` with row `i` of `vectors` (row-major), replacing the vector of an id already
    /// present. All rows are checked before anything changes, so a failed call adds nothing.
    ///
    /// # Errors
    /// `InvalidArgument` when the counts disagree, `DimensionMismatch`, `NonFiniteVector` and
    /// `ZeroVector` naming the id.
    pub fn add(&mut self, ids: &[String], vectors: &[f32]) -> CoreResult<()> {
        self.add_with_biases(ids, vectors, None)
    }

    /// [`VectorSet::add`], each row with a bias that [`VectorSet::top_k_weighted`] adds to its
    /// weighted similarity (`None`: zero). A replaced id takes the new bias.
    ///
    /// # Errors
    /// As [`VectorSet::add`]; `InvalidArgument` when there is not one finite bias per id.
    pub fn add_with_biases(
        &mut self,
        ids: &[String],
        vectors: &[f32],
        biases: Option<&[f32]>,
    ) -> CoreResult<()> {
        self.check_batch(ids, biases)?;
        if vectors.len() != ids.len() * self.dim {
            return Err(CoreError::InvalidArgument(format!(
                "got {} ids but {} values, which is not {} vectors of dimension {}",
                ids.len(),
                vectors.len(),
                ids.len(),
                self.dim
            )));
        }
        if self.is_shared() && !ids.is_empty() {
            return Err(CoreError::InvalidArgument(
                "this set reads shared rows (add_shared): it cannot take vectors of its own".into(),
            ));
        }
        let rows: Vec<&[f32]> = vectors.chunks_exact(self.dim).collect();
        let prepared = self.prepare(ids, &rows, |i, id, v| {
            let norm = checked_norm(v, |j| format!("vectors[{i}, {j}] (id {id:?})"))?;
            if norm == 0.0 {
                return Err(CoreError::ZeroVector {
                    what: format!("the vector for id {id:?} (vectors[{i}])"),
                });
            }
            let inverse = 1.0 / norm;
            Ok(Some(
                v.iter().map(|&x| (f64::from(x) * inverse) as f32).collect(),
            ))
        })?;
        self.commit(ids, prepared, biases, |_| (0, 0));
        Ok(())
    }

    /// [`VectorSet::add_with_biases`] for vectors the set reads in place rather than copies:
    /// `ids[i]` gets row `rows[i]` of `sources`, whose rows count end to end (the rows of
    /// `sources[1]` follow those of `sources[0]`). The set keeps the sources (a source given
    /// again, the same values, is kept once) and only its int8 codes and statistics of them.
    ///
    /// The rows must be unit vectors (norm within 1e-4 of 1) and must not change while the set
    /// holds them. A set holds either its own vectors or shared rows: this call is refused by a
    /// set that took vectors with [`VectorSet::add`], and the other way round.
    ///
    /// # Errors
    /// `InvalidArgument` when the counts disagree, a source is not whole rows of `dim`, a row
    /// is past the sources' end or not a unit vector (naming the id), or the set holds its own
    /// vectors; `NonFiniteVector` and `ZeroVector` naming the id; as
    /// [`VectorSet::add_with_biases`] for the biases.
    pub fn add_shared(
        &mut self,
        ids: &[String],
        sources: &[Arc<dyn SharedRows>],
        rows: &[usize],
        biases: Option<&[f32]>,
    ) -> CoreResult<()> {
        self.check_batch(ids, biases)?;
        if rows.len() != ids.len() {
            return Err(CoreError::InvalidArgument(format!(
                "got {} ids but {} rows",
                ids.len(),
                rows.len()
            )));
        }
        if matches!(&self.unit, Units::Owned(values) if !values.is_empty()) && !ids.is_empty() {
            return Err(CoreError::InvalidArgument(
                "this set holds vectors of its own (add): it cannot take shared rows".into(),
            ));
        }
        let d = self.dim;
        // Each source's first row number, counted end to end.
        let mut starts = Vec::with_capacity(sources.len() + 1);
        let mut total = 0_usize;
        for (s, source) in sources.iter().enumerate() {
            let len = source.values().len();
            if len % d != 0 {
                return Err(CoreError::InvalidArgument(format!(
                    "sources[{s}] holds {len} values, which is not whole rows of dimension {d}"
                )));
            }
            if len / d > u32::MAX as usize {
                return Err(CoreError::InvalidArgument(format!(
                    "sources[{s}] holds more than {} rows",
                    u32::MAX
                )));
            }
            starts.push(total);
            total += len / d;
        }
        let located = |i: usize| -> (usize, usize) {
            let s = starts.partition_point(|&first| first <= rows[i]) - 1;
            (s, rows[i] - starts[s])
        };
        if let Some(i) = rows.iter().position(|&r| r >= total) {
            return Err(CoreError::InvalidArgument(format!(
                "rows[{i}] (id {:?}) is {}, past the sources' {total} rows",
                ids[i], rows[i]
            )));
        }
        let views: Vec<&[f32]> = (0..ids.len())
            .map(|i| {
                let (s, r) = located(i);
                &sources[s].values()[r * d..(r + 1) * d]
            })
            .collect();
        let prepared = self.prepare(ids, &views, |i, id, v| {
            let norm = checked_norm(v, |j| format!("rows[{i}] (id {id:?}), column {j}"))?;
            if norm == 0.0 {
                return Err(CoreError::ZeroVector {
                    what: format!("the row for id {id:?} (rows[{i}])"),
                });
            }
            if (norm - 1.0).abs() > SHARED_UNIT_TOLERANCE {
                return Err(CoreError::InvalidArgument(format!(
                    "the row for id {id:?} (rows[{i}]) has norm {norm}: shared rows must be \
                     unit vectors"
                )));
            }
            Ok(None)
        })?;
        // The set's index of each given source: one already held (the same values) is reused.
        if ids.is_empty() {
            return Ok(());
        }
        if !self.is_shared() {
            self.unit = Units::Shared {
                sources: Vec::new(),
                at: Vec::new(),
            };
        }
        let Units::Shared { sources: held, .. } = &mut self.unit else {
            unreachable!("made shared above")
        };
        let index: Vec<u32> = sources
            .iter()
            .map(|source| {
                let values = source.values();
                let found = held.iter().position(|h| {
                    let h = h.values();
                    std::ptr::eq(h.as_ptr(), values.as_ptr()) && h.len() == values.len()
                });
                found.unwrap_or_else(|| {
                    held.push(Arc::clone(source));
                    held.len() - 1
                }) as u32
            })
            .collect();
        self.commit(ids, prepared, biases, |i| {
            let (s, r) = located(i);
            (index[s], r as u32)
        });
        Ok(())
    }

    /// Checks what every add checks: one finite bias per id, room for the ids.
    fn check_batch(&self, ids: &[String], biases: Option<&[f32]>) -> CoreResult<()> {
        if let Some(biases) = biases {
            if biases.len() != ids.len() {
                return Err(CoreError::InvalidArgument(format!(
                    "got {} ids but {} biases",
                    ids.len(),
                    biases.len()
                )));
            }
            if let Some(i) = biases.iter().position(|b| !b.is_finite()) {
                return Err(CoreError::InvalidArgument(format!(
                    "biases[{i}] (id {:?}) must be a finite number, got {}",
                    ids[i], biases[i]
                )));
            }
        }
        if self.ids.len() + ids.len() > u32::MAX as usize {
            return Err(CoreError::InvalidArgument(format!(
                "a VectorSet holds at most {} vectors",
                u32::MAX
            )));
        }
        Ok(())
    }

    /// Each row checked by `unit` (which returns the unit vector to keep, or None to read the
    /// row itself), quantised, and summarised; in order, so the error reported is the first
    /// row's. Nothing changes here.
    fn prepare(
        &self,
        ids: &[String],
        rows: &[&[f32]],
        unit: impl Fn(usize, &String, &[f32]) -> CoreResult<Option<Vec<f32>>> + Sync,
    ) -> CoreResult<Vec<Prepared>> {
        let cuts = &self.cuts;
        let prepare = |(i, (id, v)): (usize, (&String, &&[f32]))| -> CoreResult<Prepared> {
            let own = unit(i, id, v)?;
            let u = own.as_deref().unwrap_or(v);
            let q = quantize(u, self.stride, 127);
            let partials = cuts.iter().map(|&c| partial_stats(u, &q, c)).collect();
            Ok((own, q, partials))
        };
        let items = ids.iter().zip(rows).enumerate();
        let prepared: Vec<CoreResult<Prepared>> = if rows.len() * self.dim
            >= PARALLEL_MIN_ELEMENTS / 4
            && rayon::current_num_threads() > 1
        {
            items
                .collect::<Vec<_>>()
                .into_par_iter()
                .map(prepare)
                .collect()
        } else {
            items.map(prepare).collect()
        };
        prepared.into_iter().collect()
    }

    /// Stores prepared rows: `own` vectors into the set's copy, or else the place `shared(i)`
    /// gives (source, row) for row `i`.
    fn commit(
        &mut self,
        ids: &[String],
        prepared: Vec<Prepared>,
        biases: Option<&[f32]>,
        shared: impl Fn(usize) -> (u32, u32),
    ) {
        let d = self.dim;
        for (i, (id, (own, q, partials))) in ids.iter().zip(prepared).enumerate() {
            let bias = biases.map_or(0.0, |b| b[i]);
            self.bias_total += f64::from(bias);
            self.max_abs_bias = self.max_abs_bias.max(bias.abs());
            let existing = self.slots.get(id).copied();
            let slot = existing.unwrap_or(self.ids.len());
            for (partial, stats) in self.partials.iter_mut().zip(partials) {
                partial.set(slot, stats);
            }
            match (&mut self.unit, own) {
                (Units::Owned(values), Some(u)) => match existing {
                    Some(slot) => values[slot * d..(slot + 1) * d].copy_from_slice(&u),
                    None => values.extend_from_slice(&u),
                },
                (Units::Shared { at, .. }, None) => match existing {
                    Some(slot) => at[slot] = shared(i),
                    None => at.push(shared(i)),
                },
                _ => unreachable!("the mode is checked before rows are prepared"),
            }
            match existing {
                Some(slot) => {
                    for p in 0..self.planes.len() {
                        let cols = self.plane_columns(p);
                        let w = cols.len();
                        self.planes[p][slot * w..(slot + 1) * w].copy_from_slice(&q.codes[cols]);
                    }
                    self.code_sums[slot] = q.sum;
                    self.scales[slot] = q.scale;
                    self.residuals[slot] = q.residual;
                    self.code_norms[slot] = q.norm;
                    self.bias_total -= f64::from(self.biases[slot]);
                    self.biases[slot] = bias;
                }
                None => {
                    self.slots.insert(id.clone(), self.ids.len());
                    self.ids.push(id.clone());
                    for p in 0..self.planes.len() {
                        let cols = self.plane_columns(p);
                        self.planes[p].extend_from_slice(&q.codes[cols]);
                    }
                    self.code_sums.push(q.sum);
                    self.scales.push(q.scale);
                    self.residuals.push(q.residual);
                    self.code_norms.push(q.norm);
                    self.biases.push(bias);
                }
            }
        }
    }

    /// Removes the given ids in O(1) each (the last row moves into the hole); ids not in the set
    /// are ignored. Returns how many were removed.
    pub fn remove<S: AsRef<str>>(&mut self, ids: &[S]) -> usize {
        let mut removed = 0;
        for id in ids {
            let Some(slot) = self.slots.remove(id.as_ref()) else {
                continue;
            };
            removed += 1;
            let last = self.ids.len() - 1;
            let d = self.dim;
            match &mut self.unit {
                Units::Owned(values) => {
                    values.copy_within(last * d..(last + 1) * d, slot * d);
                    values.truncate(last * d);
                }
                Units::Shared { at, .. } => {
                    at.swap_remove(slot);
                }
            }
            if slot != last {
                for p in 0..self.planes.len() {
                    let w = self.plane_columns(p).len();
                    self.planes[p].copy_within(last * w..(last + 1) * w, slot * w);
                }
                self.slots.insert(self.ids[last].clone(), slot);
            }
            self.ids.swap_remove(slot);
            self.code_sums.swap_remove(slot);
            self.scales.swap_remove(slot);
            self.residuals.swap_remove(slot);
            self.code_norms.swap_remove(slot);
            self.bias_total -= f64::from(self.biases.swap_remove(slot));
            for partial in &mut self.partials {
                partial.swap_remove(slot);
            }
            for p in 0..self.planes.len() {
                let w = self.plane_columns(p).len();
                self.planes[p].truncate(last * w);
            }
        }
        removed
    }

    /// The unit vector stored for `id`.
    pub fn get(&self, id: &str) -> Option<&[f32]> {
        self.slots.get(id).map(|&slot| self.row(slot))
    }

    /// The `k` ids most similar to `query`, best first, with their cosine similarity; only those
    /// scoring at least `threshold` when it is given. Ties go to the id stored first.
    ///
    /// # Errors
    /// As [`super::cosine_top_k`] for the query, `k` and `threshold`.
    pub fn top_k(
        &self,
        query: &[f32],
        k: usize,
        threshold: Option<f64>,
    ) -> CoreResult<Vec<(&str, f32)>> {
        self.top_k_weighted(query, k, threshold, 1.0)
    }

    /// The `k` ids with the highest `weight · cosine(query, v) + bias` (the bias given at
    /// [`VectorSet::add_with_biases`]), best first, with that score; only those scoring at
    /// least `threshold` when it is given. Ties go to the id stored first. Each score is
    /// computed in f32 as `weight * cosine + bias`, the cosine clamped to [-1, 1].
    ///
    /// # Errors
    /// As [`VectorSet::top_k`]; `InvalidArgument` unless `weight` is finite and at least 0.
    pub fn top_k_weighted(
        &self,
        query: &[f32],
        k: usize,
        threshold: Option<f64>,
        weight: f32,
    ) -> CoreResult<Vec<(&str, f32)>> {
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(CoreError::InvalidArgument(format!(
                "weight must be a finite number >= 0, got {weight}"
            )));
        }
        if k == 0 {
            return Err(CoreError::InvalidArgument(
                "k must be at least 1, got 0".into(),
            ));
        }
        if threshold.is_some_and(f64::is_nan) {
            return Err(CoreError::InvalidArgument(
                "threshold must be a number, got NaN".into(),
            ));
        }
        let q = unit_query(query, self.dim, "query")?;
        let hits = self.search(&q, k, threshold, weight, simd::float_level(), true);
        Ok(hits
            .into_iter()
            .map(|s| (self.ids[s.index].as_str(), s.score))
            .collect())
    }

    /// The id most similar to `vector` if its similarity is at least `threshold`.
    ///
    /// # Errors
    /// As [`VectorSet::top_k`].
    pub fn find_duplicate(
        &self,
        vector: &[f32],
        threshold: f64,
    ) -> CoreResult<Option<(&str, f32)>> {
        Ok(self.top_k(vector, 1, Some(threshold))?.into_iter().next())
    }

    /// The rounding margin of a score computed as `weight * cosine + bias` in f32, against the
    /// same expression evaluated at a bound (each side rounds twice, |cosine| and the bounds
    /// stay below 4).
    fn score_margin(&self, weight: f32) -> f32 {
        16.0 * f32::EPSILON * (4.0 * weight + self.max_abs_bias)
    }

    fn search(
        &self,
        q: &[f32],
        k: usize,
        threshold: Option<f64>,
        weight: f32,
        level: Level,
        allow_prefilter: bool,
    ) -> Vec<super::Scored> {
        let n = self.len();
        let int8 = simd::int8_level();
        let prefilter = allow_prefilter
            && n >= PREFILTER_MIN_ROWS
            && self.dim <= PREFILTER_MAX_DIM
            && int8 != simd::Int8::Portable
            && k < n / 4;
        let parallel = n * self.dim >= PARALLEL_MIN_ELEMENTS && rayon::current_num_threads() > 1;
        if !prefilter {
            let scan = |rows: (usize, usize)| self.exact_scan(q, rows, k, threshold, weight, level);
            let top = if parallel {
                let parts: Vec<TopK> = chunk_bounds(n, self.dim)
                    .into_par_iter()
                    .map(scan)
                    .collect();
                let mut merged = TopK::new(k, threshold);
                parts.into_iter().for_each(|p| merged.merge(p));
                merged
            } else {
                scan((0, n))
            };
            return top.into_sorted();
        }
        let q_max = int8.query_max_code();
        let qq = quantize(q, self.stride, q_max);
        let offset = q_max + 1;
        let q_norm2: f64 = q.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        let probe = Probe {
            q_u8: qq
                .codes
                .iter()
                .map(|&c| (i32::from(c) + offset) as u8)
                .collect(),
            offset,
            scale: qq.scale,
            residual: qq.residual,
            // |x| of the (finite, unit) query; its rounding is covered by `margin`.
            norm: q_norm2.sqrt() as f32,
            partials: self
                .cuts
                .iter()
                .map(|&c| {
                    let (_, residual, _, tail) = partial_stats(q, &qq, c);
                    let head = q[..c.min(q.len())]
                        .iter()
                        .map(|&x| f64::from(x) * f64::from(x))
                        .sum();
                    [up(head), residual, tail]
                })
                .collect(),
            // f32 dot of two unit vectors: rounding error at most ~dim·ε; the approximate score
            // adds a few ulps. Doubled for headroom.
            margin: 2.0 * (self.dim as f32 + 8.0) * f32::EPSILON,
            weight,
            score_margin: self.score_margin(weight),
        };
        // In score units: how far an f32 score may sit from the bounds' arithmetic.
        let margin = weight * probe.margin + probe.score_margin;
        let probe_rows = |(s, e): (usize, usize)| self.int8_candidates(&probe, s, e, k, threshold);
        let parallel_int8 =
            n * self.stride >= PARALLEL_MIN_INT8_BYTES && rayon::current_num_threads() > 1;
        let parts: Vec<(KthLargest, Vec<(usize, f32)>)> = if parallel_int8 {
            // The int8 rows are a quarter of the f32 bytes.
            chunk_bounds(n, self.stride / 4)
                .into_par_iter()
                .map(probe_rows)
                .collect()
        } else {
            vec![probe_rows((0, n))]
        };
        let mut kth = KthLargest::new(k);
        let mut candidates = Vec::new();
        for (part_kth, part_candidates) in parts {
            kth.merge(part_kth);
            candidates.extend(part_candidates);
        }
        let floor = kth
            .kth()
            .max(threshold.map_or(f32::NEG_INFINITY, |t| t as f32 - margin));
        candidates.retain(|&(_, upper)| upper >= floor);
        // Most promising first: once k rows are scored exactly, a candidate whose upper bound
        // is below the k-th exact score cannot enter, and neither can any after it. At large N
        // the f32 rows are random reads from DRAM, so the rows skipped this way matter.
        candidates.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut top = TopK::new(k, threshold);
        for (index, upper) in candidates {
            if upper < top.floor() {
                break;
            }
            let row = self.row(index);
            top.push(
                composite(weight, simd::dot(level, row, q), self.biases[index]),
                index,
            );
        }
        top.into_sorted()
    }

    /// Rows `start..end` scored in f32, the k best kept.
    fn exact_scan(
        &self,
        q: &[f32],
        (start, end): (usize, usize),
        k: usize,
        threshold: Option<f64>,
        weight: f32,
        level: Level,
    ) -> TopK {
        let mut top = TopK::new(k, threshold);
        let mut scores = [0.0_f32; 128];
        let mut block = start;
        while block < end {
            let len = 128.min(end - block);
            match &self.unit {
                Units::Owned(values) => {
                    let rows = &values[block * self.dim..(block + len) * self.dim];
                    simd::dot_rows(level, rows, self.dim, q, &mut scores[..len]);
                }
                Units::Shared { .. } => {
                    for (i, score) in scores[..len].iter_mut().enumerate() {
                        *score = simd::dot(level, self.row(block + i), q);
                    }
                }
            }
            let biases = &self.biases[block..block + len];
            for (i, (&s, &b)) in scores[..len].iter().zip(biases).enumerate() {
                let score = composite(weight, s, b);
                if score >= top.floor() {
                    top.push(score, block + i);
                }
            }
            block += len;
        }
        top
    }

    /// Pass one over rows `start..end`: int8 scores with error bounds. Returns the k largest
    /// lower bounds and the rows whose upper bound reached the running k-th lower bound (a
    /// superset of the rows that can make the final top-k).
    ///
    /// A block is scored either at full width, or in stages of `STAGE_COLUMNS` columns: after a
    /// stage, a row whose upper bound (its int8 score so far, plus `|q_B|·|x_B|` for the columns
    /// not yet scored) is below the floor is dropped. Threshold queries (dedup) drop nearly every
    /// row after the first stage; a top-k query scores at full width until its floor has risen,
    /// and a block of high-bias rows may take its first stage over two planes' columns.
    fn int8_candidates(
        &self,
        probe: &Probe,
        start: usize,
        end: usize,
        k: usize,
        threshold: Option<f64>,
    ) -> (KthLargest, Vec<(usize, f32)>) {
        // The bounds around the int8 kernel are a quarter to a third of the pass: compiled for
        // the baseline they run four lanes at a time (and multiply i32 with two shuffles), so
        // the pass is compiled again for the instruction set the kernel itself runs with.
        #[cfg(target_arch = "x86_64")]
        match simd::int8_level() {
            // SAFETY: the level is only `Vnni` when the CPU reports avx512f, avx512bw and
            // avx512vnni, and only `Avx2` when it reports avx2.
            simd::Int8::Vnni => {
                return unsafe { self.int8_candidates_avx512(probe, start, end, k, threshold) }
            }
            simd::Int8::Avx2 => {
                return unsafe { self.int8_candidates_avx2(probe, start, end, k, threshold) }
            }
            simd::Int8::Portable => {}
        }
        self.int8_candidates_inline::<false>(probe, start, end, k, threshold)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn int8_candidates_avx512(
        &self,
        probe: &Probe,
        start: usize,
        end: usize,
        k: usize,
        threshold: Option<f64>,
    ) -> (KthLargest, Vec<(usize, f32)>) {
        self.int8_candidates_inline::<true>(probe, start, end, k, threshold)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn int8_candidates_avx2(
        &self,
        probe: &Probe,
        start: usize,
        end: usize,
        k: usize,
        threshold: Option<f64>,
    ) -> (KthLargest, Vec<(usize, f32)>) {
        self.int8_candidates_inline::<false>(probe, start, end, k, threshold)
    }

    /// The pass itself, inlined into each of the dispatch targets above; `AVX512` only where
    /// the CPU has AVX-512 (it compares sixteen bounds with one instruction).
    #[inline(always)]
    fn int8_candidates_inline<const AVX512: bool>(
        &self,
        probe: &Probe,
        start: usize,
        end: usize,
        k: usize,
        threshold: Option<f64>,
    ) -> (KthLargest, Vec<(usize, f32)>) {
        let mut pass = Pass {
            kth: KthLargest::new(k),
            candidates: Vec::new(),
            min_upper: threshold.map_or(f32::NEG_INFINITY, |t| {
                t as f32 - (probe.weight * probe.margin + probe.score_margin)
            }),
        };
        let mut rows = [0_u32; INT8_BLOCK];
        let mut raw = [0_i32; INT8_BLOCK];
        // Zeroed once per search rather than once per block: a dedup check's blocks drop
        // nearly every row, and clearing 2-3 KB of scratch for each was a few percent of it.
        let mut scratch = Scratch {
            part: [0; INT8_BLOCK],
            upper: [0.0; INT8_BLOCK],
            lower: [0.0; INT8_BLOCK],
        };
        // The first stage drops a row when its bound is below the floor; a typical row's bound
        // is about |q_B| times the mean |x_B|, weighted, plus its bias, so below that floor
        // staging would drop little. The bias is the block's mean: rows stored by descending
        // bias (a composite ranking does) make later blocks worth staging where early ones
        // were not.
        //
        // A block the first cut cannot thin (high-bias rows, whose floor less bias is low) may
        // still be thinned at the second: its first stage then scores two planes, and only the
        // rows it keeps read the rest. Per cut (at most `MAX_FIRST_CUTS`), that typical bound.
        let mut typical = [f32::INFINITY; MAX_FIRST_CUTS];
        for ((bound, partial), &[_, _, q_tail]) in
            typical.iter_mut().zip(&self.partials).zip(&probe.partials)
        {
            *bound = probe.weight * q_tail * partial.mean_tail();
        }
        // Per cut: how far above its block's mean bias the floor was when a first stage at
        // that cut last kept most rows.
        let mut failed_margins = [f32::NEG_INFINITY; MAX_FIRST_CUTS];
        let mut block = start;
        while block < end {
            let len = INT8_BLOCK.min(end - block);
            let floor = pass.kth.kth().max(pass.min_upper);
            let block_bias = if self.max_abs_bias == 0.0 {
                0.0
            } else {
                mean(&self.biases[block..block + len])
            };
            let margin = floor - block_bias;
            let worth = |cut: usize, ratio: f32| {
                margin >= ratio * typical[cut] && margin >= failed_margins[cut] + STAGE_RETRY_RISE
            };
            let first = if worth(0, EARLY_STAGE_FLOOR_RATIO) {
                Some(0)
            } else if worth(1, STAGE_FLOOR_RATIO) {
                Some(1)
            } else if worth(0, STAGE_FLOOR_RATIO) {
                Some(0)
            } else {
                None
            };
            #[cfg(test)]
            let first = FIRST_CUT_FOR_TESTS
                .with(std::cell::Cell::get)
                .map_or(first, |forced| {
                    forced.filter(|&c| c < self.cuts.len().min(MAX_FIRST_CUTS))
                });
            if let Some(first) = first {
                let kept = self.staged_block::<AVX512>(
                    probe,
                    &mut pass,
                    &mut rows,
                    &mut raw,
                    &mut scratch,
                    block,
                    len,
                    first,
                );
                if 2 * kept > len {
                    failed_margins[first] = margin;
                }
            } else {
                self.full_block(probe, &mut pass, &mut raw[..len], &mut scratch, block);
            }
            block += len;
        }
        (pass.kth, pass.candidates)
    }

    /// Scores rows `block..block + raw.len()` at full width, with the bounds computed
    /// branch-free over the whole block.
    #[inline(always)]
    fn full_block(
        &self,
        probe: &Probe,
        pass: &mut Pass,
        raw: &mut [i32],
        scratch: &mut Scratch,
        block: usize,
    ) {
        let len = raw.len();
        let all = simd::Block { start: block, len };
        self.plane_dots(0, all, &probe.q_u8, raw);
        let Scratch { part, upper, lower } = scratch;
        for p in 1..self.planes.len() {
            self.plane_dots(p, all, &probe.q_u8, &mut part[..len]);
            for (r, x) in raw.iter_mut().zip(&part[..len]) {
                *r += x;
            }
        }
        let range = block..block + len;
        // Every slice has exactly `len` elements, so the compiler drops the bounds checks and
        // vectorises this branch-free loop.
        let raw = &raw[..len];
        let sums = &self.code_sums[range.clone()];
        let scales = &self.scales[range.clone()];
        let residuals = &self.residuals[range.clone()];
        let norms = &self.code_norms[range.clone()];
        let biases = &self.biases[range];
        let (up, low) = (&mut upper[..len], &mut lower[..len]);
        let (w, extra) = (probe.weight, probe.score_margin);
        for i in 0..len {
            // Exact product of the signed codes (the query was offset by `probe.offset`); no
            // overflow below PREFILTER_MAX_DIM.
            let product = raw[i] - probe.offset * sums[i];
            let approx = scales[i] * probe.scale * product as f32;
            // |x·v - x̂·v̂| <= |x|·|v - v̂| + |x - x̂|·|v̂|
            let bound = probe.norm * residuals[i] + probe.residual * norms[i] + probe.margin;
            up[i] = w * (approx + bound) + biases[i] + extra;
            low[i] = w * (approx - bound) + biases[i] - extra;
        }
        let mut kth_lower = pass.kth.kth();
        for (c, (ups, lows)) in up.chunks(16).zip(low.chunks(16)).enumerate() {
            // Most groups hold no row of interest: a branch-free test skips them whole.
            let floor = kth_lower.max(pass.min_upper);
            let any = ups
                .iter()
                .zip(lows)
                .fold(false, |hit, (&u, &l)| hit | (l > kth_lower) | (u >= floor));
            if !any {
                continue;
            }
            for (i, (&u, &l)) in ups.iter().zip(lows).enumerate() {
                kth_lower = pass.offer(block + c * 16 + i, u, l, kth_lower);
            }
        }
    }

    /// Scores rows `block..block + len` stage by stage, keeping in `rows` (and their partial
    /// sums in `raw`) only those that can still reach the floor; returns how many rows the
    /// first stage kept. The first stage scores every row up to cut `first` (planes
    /// `0..=first`), each later stage one plane of the rows still kept.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn staged_block<const AVX512: bool>(
        &self,
        probe: &Probe,
        pass: &mut Pass,
        rows: &mut [u32; INT8_BLOCK],
        raw: &mut [i32; INT8_BLOCK],
        scratch: &mut Scratch,
        block: usize,
        len: usize,
        first: usize,
    ) -> usize {
        // The floor at the start of the block: it only rises, so dropping against it is safe.
        let floor = pass.kth.kth().max(pass.min_upper);
        // The first stage covers the whole block: its bounds are computed over contiguous
        // slices, branch-free (the loop vectorises), then the survivors are gathered.
        let all = simd::Block { start: block, len };
        // Stage s is plane s: the cuts are the planes' boundaries.
        self.plane_dots(0, all, &probe.q_u8, &mut raw[..len]);
        let Scratch { part, upper, .. } = scratch;
        for p in 1..=first {
            self.plane_dots(p, all, &probe.q_u8, &mut part[..len]);
            for (r, x) in raw[..len].iter_mut().zip(&part[..len]) {
                *r += x;
            }
        }
        let range = block..block + len;
        let head = &self.partials[first];
        let [q_head, q_residual, q_tail] = probe.partials[first];
        let (sums, scales) = (&head.sums[range.clone()], &self.scales[range.clone()]);
        let (residuals, norms) = (&head.residuals[range.clone()], &head.norms[range.clone()]);
        let tails = &head.tails[range.clone()];
        let biases = &self.biases[range];
        let (w, extra) = (probe.weight, probe.score_margin);
        let (upper, scored) = (&mut upper[..len], &raw[..len]);
        for i in 0..len {
            let approx = scales[i] * probe.scale * (scored[i] - probe.offset * sums[i]) as f32;
            // As in `full_block` over the columns scored so far, plus at most |q_B|·|x_B| from
            // the columns after the cut (Cauchy-Schwarz).
            upper[i] = w
                * (approx
                    + q_head * residuals[i]
                    + q_residual * norms[i]
                    + q_tail * tails[i]
                    + probe.margin)
                + biases[i]
                + extra;
        }
        // A dedup query keeps almost no row: one compare per 16 rows, then only the kept ones
        // visited (a compare and branch per row was a tenth of the whole search).
        let mut alive = 0;
        // The kept rows' next plane is read row by row, scattered: asked for as each is found,
        // their lines arrive while the rest of the block is sorted. Only a row's first line:
        // prefetches wait for a free miss slot behind the streaming kernel's, and asking for
        // one line a row measured faster than two (dedup ~32.7 -> ~31.8 us).
        let next_plane = self
            .planes
            .get(first + 1)
            .map(|p| (p.as_ptr(), self.plane_columns(first + 1).len()));
        for (c, group) in upper.chunks(16).enumerate() {
            let mut kept = survivors::<AVX512>(group, floor);
            while kept != 0 {
                let i = c * 16 + kept.trailing_zeros() as usize;
                if let Some((codes, width)) = next_plane {
                    simd::prefetch_line(codes, (block + i) * width);
                }
                rows[alive] = (block + i) as u32;
                raw[alive] = raw[i];
                alive += 1;
                kept &= kept - 1;
            }
        }
        let first_kept = alive;
        for stage in first + 1..self.cuts.len() {
            if alive == 0 {
                return first_kept;
            }
            self.plane_dots(stage, &rows[..alive], &probe.q_u8, &mut part[..alive]);
            let partial = &self.partials[stage];
            let [q_head, q_residual, q_tail] = probe.partials[stage];
            let mut kept = 0;
            for j in 0..alive {
                let (r, sum) = (rows[j] as usize, raw[j] + part[j]);
                let approx =
                    self.scales[r] * probe.scale * (sum - probe.offset * partial.sums[r]) as f32;
                let upper = w
                    * (approx
                        + q_head * partial.residuals[r]
                        + q_residual * partial.norms[r]
                        + q_tail * partial.tails[r]
                        + probe.margin)
                    + self.biases[r]
                    + extra;
                if upper >= floor {
                    rows[kept] = r as u32;
                    raw[kept] = sum;
                    kept += 1;
                }
            }
            alive = kept;
        }
        if alive == 0 {
            return first_kept;
        }
        let last = self.planes.len() - 1;
        self.plane_dots(last, &rows[..alive], &probe.q_u8, &mut part[..alive]);
        let mut kth_lower = pass.kth.kth();
        for j in 0..alive {
            let r = rows[j] as usize;
            let product = raw[j] + part[j] - probe.offset * self.code_sums[r];
            let approx = self.scales[r] * probe.scale * product as f32;
            let bound =
                probe.norm * self.residuals[r] + probe.residual * self.code_norms[r] + probe.margin;
            let bias = self.biases[r];
            kth_lower = pass.offer(
                r,
                w * (approx + bound) + bias + extra,
                w * (approx - bound) + bias - extra,
                kth_lower,
            );
        }
        first_kept
    }
}

#[cfg(test)]
thread_local! {
    /// Set by `with_first_cut`: every block's choice, `None` for full width.
    static FIRST_CUT_FOR_TESTS: std::cell::Cell<Option<Option<usize>>> =
        const { std::cell::Cell::new(None) };
}

/// Runs `f` with every block of the int8 pass on this thread scored as `first` says: from a
/// first stage at that cut, or at full width (`None`), whatever the staging rule would choose.
#[cfg(test)]
fn with_first_cut<T>(first: Option<usize>, f: impl FnOnce() -> T) -> T {
    FIRST_CUT_FOR_TESTS.with(|c| c.set(Some(first)));
    let out = f();
    FIRST_CUT_FOR_TESTS.with(|c| c.set(None));
    out
}

/// Per-block working arrays of the int8 pass, made once per search (every use writes before it
/// reads).
struct Scratch {
    part: [i32; INT8_BLOCK],
    upper: [f32; INT8_BLOCK],
    lower: [f32; INT8_BLOCK],
}

/// What the int8 pass has found so far.
struct Pass {
    /// The k largest lower bounds.
    kth: KthLargest,
    /// Rows whose upper bound reached the k-th lower bound when they were scored.
    candidates: Vec<(usize, f32)>,
    min_upper: f32,
}

impl Pass {
    /// Takes a fully scored row's bounds; returns the new k-th lower bound.
    #[inline]
    fn offer(&mut self, row: usize, upper: f32, lower: f32, mut kth_lower: f32) -> f32 {
        if lower > kth_lower {
            self.kth.push(lower);
            kth_lower = self.kth.kth();
        }
        if upper >= kth_lower && upper >= self.min_upper {
            self.candidates.push((row, upper));
        }
        kth_lower
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    fn ids(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("id{i}")).collect()
    }

    #[test]
    fn the_residual_covers_every_column_whatever_the_dim() {
        // It once skipped the last `dim % 8` columns (the codes run on to the stride), so the
        // bounds were too tight and top-k could miss a row: dim 2 found it, and the composite
        // ranker's dim (384 + 2) had it too.
        for dim in [1_usize, 2, 7, 9, 63, 65, 386] {
            let raw = random(dim, dim as u64 + 3);
            let norm = raw
                .iter()
                .map(|&x| f64::from(x).powi(2))
                .sum::<f64>()
                .sqrt();
            let v: Vec<f32> = raw.iter().map(|&x| (f64::from(x) / norm) as f32).collect();
            let q = quantize(&v, dim.div_ceil(64) * 64, 127);
            let scale = f64::from(q.scale);
            let exact = v
                .iter()
                .zip(&q.codes)
                .map(|(&x, &c)| (f64::from(x) - scale * f64::from(c)).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(exact > 0.0, "dim {dim}");
            let residual = f64::from(q.residual);
            assert!(
                residual >= exact && residual <= exact * 1.0001,
                "dim {dim}: {residual} vs {exact}"
            );
        }
    }

    #[test]
    fn prefilter_gives_exactly_the_exhaustive_answer() {
        let dim = 96;
        let mut set = VectorSet::new(dim).unwrap();
        // Clustered data: many near-ties, the hard case for a prefilter.
        let base = random(dim, 1);
        let noise = random(5000 * dim, 2);
        let data: Vec<f32> = noise
            .iter()
            .enumerate()
            .map(|(i, x)| base[i % dim] + 0.05 * x)
            .collect();
        set.add(&ids(0..5000), &data).unwrap();
        for seed in 0..20 {
            let q: Vec<f32> = random(dim, 100 + seed)
                .iter()
                .zip(&base)
                .map(|(x, b)| b + 0.05 * x)
                .collect();
            let qn = unit_query(&q, dim, "query").unwrap();
            for (k, t) in [(1, None), (10, None), (50, Some(0.99)), (1, Some(0.999))] {
                let level = simd::float_level();
                let fast = set.search(&qn, k, t, 1.0, level, true);
                let exact = set.search(&qn, k, t, 1.0, level, false);
                let f: Vec<(usize, u32)> =
                    fast.iter().map(|s| (s.index, s.score.to_bits())).collect();
                let e: Vec<(usize, u32)> =
                    exact.iter().map(|s| (s.index, s.score.to_bits())).collect();
                assert_eq!(f, e, "seed {seed} k {k} t {t:?}");
            }
        }
    }

    /// The fast and the exhaustive search agree, bit for bit, on `set`.
    fn assert_exact(set: &VectorSet, qn: &[f32], cases: &[(usize, Option<f64>)], what: &str) {
        assert_exact_weighted(set, qn, cases, 1.0, what);
    }

    fn assert_exact_weighted(
        set: &VectorSet,
        qn: &[f32],
        cases: &[(usize, Option<f64>)],
        weight: f32,
        what: &str,
    ) {
        let level = simd::float_level();
        for (&(k, t), int8) in cases.iter().flat_map(|c| {
            simd::available_int8_levels()
                .into_iter()
                .map(move |l| (c, l))
        }) {
            let exact = set.search(qn, k, t, weight, level, false);
            let e: Vec<(usize, u32)> = exact.iter().map(|s| (s.index, s.score.to_bits())).collect();
            // The int8 pass of every level the CPU runs (the AVX2 one on a VNNI machine too),
            // with the staging rule's own choices, then with every block at full width and
            // from a first stage at each cut: whatever a block's path, the answer is the same.
            let fast = || set.search(qn, k, t, weight, level, true);
            let chosen = simd::with_int8_level(int8, fast);
            let f: Vec<(usize, u32)> = chosen
                .iter()
                .map(|s| (s.index, s.score.to_bits()))
                .collect();
            assert_eq!(f, e, "{what} k {k} t {t:?} int8 {int8:?}");
            for first in [None, Some(0), Some(1)] {
                let forced = simd::with_int8_level(int8, || with_first_cut(first, fast));
                let f: Vec<(usize, u32)> = forced
                    .iter()
                    .map(|s| (s.index, s.score.to_bits()))
                    .collect();
                assert_eq!(
                    f, e,
                    "{what} k {k} t {t:?} int8 {int8:?} first cut {first:?}"
                );
            }
        }
    }

    #[test]
    fn staged_prefilter_gives_exactly_the_exhaustive_answer() {
        // dim 386 (stride 448): three cuts, a last stage narrower than the others.
        for dim in [384, 386] {
            let mut set = VectorSet::new(dim).unwrap();
            assert!(!set.cuts.is_empty());
            // Clusters of near-duplicates around a few centres: similarities spread over the
            // whole range, so thresholds fall between rows that stages keep and drop.
            let centres = random(8 * dim, 3);
            let noise = random(6000 * dim, 4);
            let data: Vec<f32> = noise
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    centres[(i / dim % 8) * dim + i % dim]
                        + (0.02 + (i / dim % 5) as f32 * 0.05) * x
                })
                .collect();
            set.add(&ids(0..6000), &data).unwrap();
            // Replacing and removing rows must keep the per-cut statistics in step.
            set.add(&ids(0..500), &random(500 * dim, 9)).unwrap();
            set.remove(&ids(1000..1400));
            for seed in 0..12 {
                let centre = &centres[(seed as usize % 8) * dim..][..dim];
                let q: Vec<f32> = random(dim, 200 + seed)
                    .iter()
                    .zip(centre)
                    .map(|(x, c)| c + 0.05 * x)
                    .collect();
                let qn = unit_query(&q, dim, "query").unwrap();
                let cases = [
                    (1, Some(0.85)),
                    (1, Some(0.99)),
                    (1, Some(0.999)),
                    (5, Some(0.5)),
                    (10, None),
                    (1, None),
                ];
                assert_exact(&set, &qn, &cases, &format!("dim {dim} seed {seed}"));
            }
            // Unrelated queries: the staged pass drops every row at its first cut.
            for seed in 0..4 {
                let qn = unit_query(&random(dim, 900 + seed), dim, "query").unwrap();
                assert_exact(&set, &qn, &[(1, Some(0.85)), (3, Some(0.2))], "unrelated");
            }
        }
    }

    #[test]
    fn a_row_whose_int8_error_lies_along_the_query_is_still_found() {
        // The query (entries 0 or ±1: exact in int8 at every level) points along one row's
        // int8 rounding error, where the Cauchy-Schwarz bound is tight: the row's int8 score
        // understates it by the whole residual. The other rows are exact in int8 too and
        // biased to score just under it, so the floor sits right under its true score: a bound
        // any tighter drops it.
        let (dim, n, weight) = (64, 1024, 0.6_f32);
        let signs = random((n + 1) * dim, 42);
        let ternary = |r: usize| -> Vec<f32> {
            let mut row: Vec<f32> = signs[r * dim..(r + 1) * dim]
                .iter()
                .map(|&s| {
                    if s > 0.2 {
                        1.0
                    } else if s < -0.2 {
                        -1.0
                    } else {
                        0.0
                    }
                })
                .collect();
            row[0] = 1.0;
            row
        };
        let mut q = ternary(0);
        q[0] = 0.0;
        // On the int8 grid of step 2^-7 (the largest code, 127, where the query is 0), plus
        // 0.45 of a step along the query: the codes round back to the grid.
        let step = 1.0 / 128.0_f32;
        let codes: Vec<f32> = random(dim, 41)
            .iter()
            .enumerate()
            .map(|(j, &x)| if j == 0 { 127.0 } else { (x * 200.0).round() })
            .collect();
        let v: Vec<f32> = codes
            .iter()
            .zip(&q)
            .map(|(&c, &d)| step * c + 0.45 * step * d)
            .collect();
        let cosine = |row: &[f32]| -> f64 {
            let dot: f64 = row
                .iter()
                .zip(&q)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let norm = |x: &[f32]| x.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt();
            dot / norm(row) / norm(&q)
        };
        let v_norm = v.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt();
        let q_norm = q.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt();
        // |v - v̂| of the unit row: 0.45 of a step in every column where the query is not 0.
        let error = 0.45 * f64::from(step) * q_norm / v_norm;
        let target = f64::from(weight) * cosine(&v);
        let mut data = Vec::with_capacity(n * dim);
        let mut biases = Vec::with_capacity(n);
        for r in 0..n {
            let row = if r == 700 { v.clone() } else { ternary(r + 1) };
            let bias = if r == 700 {
                0.0
            } else {
                // Just under the row at 700: a tenth of its int8 error.
                target - 0.1 * f64::from(weight) * error - f64::from(weight) * cosine(&row)
            };
            data.extend_from_slice(&row);
            biases.push(bias as f32);
        }
        let mut set = VectorSet::new(dim).unwrap();
        set.add_with_biases(&ids(0..n), &data, Some(&biases))
            .unwrap();
        let qn = unit_query(&q, dim, "query").unwrap();
        let level = simd::float_level();
        let exact = set.search(&qn, 1, None, weight, level, false);
        assert_eq!(exact[0].index, 700, "the construction puts row 700 first");
        assert_exact_weighted(&set, &qn, &[(1, None), (3, None)], weight, "aligned error");
    }

    mod exact_properties {
        use super::*;
        use proptest::prelude::*;

        /// What multiplies a row: ordinary, tiny and huge magnitudes (all finite).
        const MAGNITUDES: [f32; 5] = [1.0, 1e-30, 1e30, 1e-3, 3e3];

        /// `rows` rows of `dim` values from `seed`: random (`shape` 0), five distinct rows
        /// repeated (1: ties), or one row throughout (2); each row scaled by one of
        /// `MAGNITUDES`, and every seventh row given an extreme element. No row is zero.
        fn rows_of(shape: usize, rows: usize, dim: usize, seed: u64) -> Vec<f32> {
            let base = random(rows * dim, seed);
            let mut data = Vec::with_capacity(rows * dim);
            for r in 0..rows {
                let source = match shape {
                    0 => r,
                    1 => r % 5,
                    _ => 0,
                };
                let scale = if shape == 0 {
                    MAGNITUDES[r % MAGNITUDES.len()]
                } else {
                    1.0
                };
                let mut row: Vec<f32> = base[source * dim..(source + 1) * dim]
                    .iter()
                    .map(|&x| x * scale)
                    .collect();
                if shape == 0 && r % 7 == 3 {
                    row[r % dim] = if r % 2 == 0 { f32::MAX } else { -f32::MAX };
                }
                if row.iter().all(|&x| x == 0.0) {
                    row[0] = 1.0;
                }
                data.extend_from_slice(&row);
            }
            data
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(24))]

            /// The prefilter (every int8 level, each block staged or at full width) answers
            /// exactly as the exhaustive search does: ids, order and f32 scores.
            #[test]
            fn prefilter_answers_as_the_exhaustive_search(
                dim in prop_oneof![1usize..70, Just(384_usize)],
                rows in 520usize..1300,
                shape in 0usize..3,
                seed in 0u64..1_000_000,
                query_from_row in prop::option::of(0usize..520),
                k in prop_oneof![1usize..40, 1300usize..1400],
                threshold in prop_oneof![
                    Just(None),
                    (-2.0f64..2.0).prop_map(Some),
                    Just(Some(10.0)),
                ],
                weight in prop_oneof![Just(0.6_f32), 0.0f32..3.0],
                grid_biases in any::<bool>(),
            ) {
                let data = rows_of(shape, rows, dim, seed);
                let biases: Vec<f32> = random(rows, seed + 1)
                    .iter()
                    .map(|&b| if grid_biases { ((b + 0.5) * 4.0).round() * 0.1 } else { b + 0.5 })
                    .collect();
                let mut set = VectorSet::new(dim).unwrap();
                set.add_with_biases(&ids(0..rows), &data, Some(&biases)).unwrap();
                let q = match query_from_row {
                    Some(r) => data[r * dim..(r + 1) * dim].to_vec(),
                    None => random(dim, seed + 2),
                };
                prop_assume!(q.iter().any(|&x| x != 0.0));
                let qn = unit_query(&q, dim, "query").unwrap();
                let what = format!("dim {dim} rows {rows} shape {shape} seed {seed}");
                assert_exact_weighted(&set, &qn, &[(k, threshold)], weight, &what);
            }
        }
    }

    #[test]
    fn biased_search_gives_exactly_the_brute_force_answer() {
        // A composite ranking, as AgentMind's recall: biases up to 0.4 against a 0.6 weight,
        // so a row's rank depends on both; and the same rows under other weights.
        for dim in [384, 386, 96] {
            let mut set = VectorSet::new(dim).unwrap();
            let centres = random(8 * dim, 13);
            let noise = random(4000 * dim, 14);
            let data: Vec<f32> = noise
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    centres[(i / dim % 8) * dim + i % dim]
                        + (0.02 + (i / dim % 5) as f32 * 0.05) * x
                })
                .collect();
            let mut biases: Vec<f32> = random(4000, 15).iter().map(|b| (b + 0.5) * 0.4).collect();
            if dim == 384 {
                // Stored by descending bias, as AgentMind's ranker stores them: blocks of
                // high-bias rows read whole, then staged blocks of low-bias ones.
                biases.sort_by(|a, b| b.total_cmp(a));
            }
            set.add_with_biases(&ids(0..4000), &data, Some(&biases))
                .unwrap();
            // A replaced row takes its new bias; an `add` without biases resets it to zero.
            set.add_with_biases(&ids(0..300), &random(300 * dim, 16), Some(&vec![0.35; 300]))
                .unwrap();
            set.add(&ids(300..400), &random(100 * dim, 17)).unwrap();
            set.remove(&ids(1000..1300));
            let level = simd::float_level();
            for seed in 0..8 {
                let centre = &centres[(seed as usize % 8) * dim..][..dim];
                let q: Vec<f32> = random(dim, 300 + seed)
                    .iter()
                    .zip(centre)
                    .map(|(x, c)| c + if seed < 6 { 0.05 } else { 5.0 } * x)
                    .collect();
                let qn = unit_query(&q, dim, "query").unwrap();
                for weight in [0.6_f32, 0.0, 1.0, 3.0] {
                    let cases = [
                        (5, Some(0.35)),
                        (1, Some(0.9)),
                        (10, None),
                        (1, None),
                        (50, Some(0.5)),
                    ];
                    let what = format!("dim {dim} seed {seed} weight {weight}");
                    assert_exact_weighted(&set, &qn, &cases, weight, &what);
                    // And the exhaustive search is the formula, row by row.
                    let mut all: Vec<(f32, usize)> = (0..set.len())
                        .map(|r| {
                            let row = set.row(r);
                            (
                                composite(weight, simd::dot(level, row, &qn), set.biases[r]),
                                r,
                            )
                        })
                        .collect();
                    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                    let got: Vec<(usize, u32)> = set
                        .search(&qn, 10, None, weight, level, true)
                        .iter()
                        .map(|s| (s.index, s.score.to_bits()))
                        .collect();
                    let want: Vec<(usize, u32)> =
                        all[..10].iter().map(|&(s, r)| (r, s.to_bits())).collect();
                    assert_eq!(got, want, "{what}");
                }
            }
        }
    }

    #[test]
    fn weights_and_biases_are_checked() {
        let mut set = VectorSet::new(4).unwrap();
        let v = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
        let two = ids(0..2);
        let e = set.add_with_biases(&two, &v, Some(&[0.1])).unwrap_err();
        assert!(e.to_string().contains("2 ids but 1 biases"), "{e}");
        let e = set
            .add_with_biases(&two, &v, Some(&[0.1, f32::NAN]))
            .unwrap_err();
        assert!(e.to_string().contains("biases[1]"), "{e}");
        assert!(set.is_empty(), "a refused add changes nothing");
        set.add_with_biases(&two, &v, Some(&[0.0, 0.5])).unwrap();
        let q = [1.0, 0.0, 0.0, 0.0];
        for bad in [-1.0, f32::NAN, f32::INFINITY] {
            let e = set.top_k_weighted(&q, 1, None, bad).unwrap_err();
            assert!(e.to_string().contains("weight"), "{e}");
        }
        // cos 1 + 0 against cos 0 + 0.5: the weight decides.
        assert_eq!(set.top_k_weighted(&q, 1, None, 1.0).unwrap()[0].0, "id0");
        assert_eq!(set.top_k_weighted(&q, 1, None, 0.4).unwrap()[0].0, "id1");
        assert_eq!(set.top_k(&q, 2, None).unwrap()[1], ("id1", 0.5));
    }

    #[test]
    fn parallel_prefilter_gives_exactly_the_exhaustive_answer() {
        let (n, dim) = (22_000, 384);
        let mut set = VectorSet::new(dim).unwrap();
        assert!(n * set.stride >= PARALLEL_MIN_INT8_BYTES);
        set.add(&ids(0..n), &random(n * dim, 5)).unwrap();
        for seed in 0..3 {
            let qn = unit_query(&random(dim, 50 + seed), dim, "query").unwrap();
            for (k, t) in [(1, None), (10, None), (5, Some(0.1))] {
                let level = simd::float_level();
                let fast = set.search(&qn, k, t, 1.0, level, true);
                let exact = set.search(&qn, k, t, 1.0, level, false);
                let f: Vec<(usize, u32)> =
                    fast.iter().map(|s| (s.index, s.score.to_bits())).collect();
                let e: Vec<(usize, u32)> =
                    exact.iter().map(|s| (s.index, s.score.to_bits())).collect();
                assert_eq!(f, e, "seed {seed} k {k} t {t:?}");
            }
        }
    }

    #[test]
    fn add_replace_remove() {
        let mut set = VectorSet::new(2).unwrap();
        set.add(&ids(0..3), &[1.0, 0.0, 0.0, 2.0, 1.0, 1.0])
            .unwrap();
        assert_eq!(set.len(), 3);
        let top = set.top_k(&[0.0, 1.0], 3, None).unwrap();
        assert_eq!(top[0].0, "id1");
        assert!((top[0].1 - 1.0).abs() < 1e-6);
        set.add(&["id1".to_string()], &[-3.0, 0.0]).unwrap();
        assert_eq!(set.len(), 3);
        assert_eq!(set.get("id1").unwrap(), &[-1.0, 0.0]);
        assert_eq!(set.remove(&["id0", "nope"]), 1);
        assert_eq!(set.len(), 2);
        assert!(!set.contains("id0") && set.contains("id2") && set.contains("id1"));
        assert_eq!(
            set.get("id2").unwrap(),
            &[std::f32::consts::FRAC_1_SQRT_2; 2]
        );
        let dup = set.find_duplicate(&[-1.0, 0.01], 0.99).unwrap();
        assert_eq!(dup.map(|d| d.0), Some("id1"));
        assert_eq!(set.find_duplicate(&[0.0, -1.0], 0.5).unwrap(), None);
        assert_eq!(set.remove(&["id1", "id2"]), 2);
        assert!(set.is_empty());
        assert_eq!(set.top_k(&[1.0, 0.0], 1, None).unwrap(), vec![]);
    }

    #[test]
    fn failed_add_changes_nothing_and_names_the_id() {
        let mut set = VectorSet::new(2).unwrap();
        let err = set.add(&ids(0..2), &[1.0, 0.0, 0.0, 0.0]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the vector for id \"id1\" (vectors[1]) is a zero vector; cosine similarity is undefined for it"
        );
        let err = set.add(&ids(0..2), &[1.0, 0.0, 0.0, f32::NAN]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "vectors[1, 1] (id \"id1\") is NaN; vectors must hold finite numbers"
        );
        assert!(set.is_empty());
        assert!(set.add(&ids(0..2), &[1.0, 0.0]).is_err());
        assert!(VectorSet::new(0).is_err());
        assert!(matches!(
            set.top_k(&[1.0], 1, None),
            Err(CoreError::DimensionMismatch {
                expected: 2,
                got: 1,
                ..
            })
        ));
    }

    /// `rows` scaled to unit length in f64, as their owner would keep them.
    fn unit_rows(rows: &[f32], dim: usize) -> Vec<f32> {
        rows.chunks(dim)
            .flat_map(|r| {
                let n = r.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
                r.iter().map(move |&x| (f64::from(x) / n) as f32)
            })
            .collect()
    }

    #[test]
    fn shared_rows_answer_as_the_set_own_copy_does() {
        let (dim, n) = (96, 3000);
        let rows = unit_rows(&random(n * dim, 5), dim);
        let biases: Vec<f32> = (0..n).map(|i| (i % 17) as f32 / 40.0).collect();
        // Stored in another order than the sources' (as a ranker stores by bias), over two
        // sources.
        let order: Vec<usize> = (0..n).map(|i| (i * 7) % n).collect();
        let first: Arc<dyn SharedRows> = Arc::new(rows[..1000 * dim].to_vec());
        let second: Arc<dyn SharedRows> = Arc::new(rows[1000 * dim..].to_vec());
        let ids: Vec<String> = order.iter().map(|i| format!("id{i}")).collect();
        let ordered_biases: Vec<f32> = order.iter().map(|&i| biases[i]).collect();
        let mut shared = VectorSet::new(dim).unwrap();
        for part in (0..n).collect::<Vec<_>>().chunks(700) {
            let rows_of: Vec<usize> = part.iter().map(|&j| order[j]).collect();
            let part_ids: Vec<String> = part.iter().map(|&j| ids[j].clone()).collect();
            let part_biases: Vec<f32> = part.iter().map(|&j| ordered_biases[j]).collect();
            shared
                .add_shared(
                    &part_ids,
                    &[Arc::clone(&first), Arc::clone(&second)],
                    &rows_of,
                    Some(&part_biases),
                )
                .unwrap();
        }
        assert!(shared.is_shared());
        let Units::Shared { sources, at } = &shared.unit else {
            unreachable!()
        };
        assert_eq!((sources.len(), at.len()), (2, n)); // each source kept once
        let mut own = VectorSet::new(dim).unwrap();
        let flat: Vec<f32> = order
            .iter()
            .flat_map(|&i| rows[i * dim..(i + 1) * dim].to_vec())
            .collect();
        own.add_with_biases(&ids, &flat, Some(&ordered_biases))
            .unwrap();
        for seed in 0..20 {
            let q = random(dim, 700 + seed);
            for (k, threshold, weight) in [(5, None, 0.6), (50, None, 1.0), (10, Some(0.3), 0.6)] {
                let a = shared.top_k_weighted(&q, k, threshold, weight).unwrap();
                let b = own.top_k_weighted(&q, k, threshold, weight).unwrap();
                assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().zip(&b) {
                    assert!((x.1 - y.1).abs() < 1e-5, "{x:?} against {y:?}");
                }
                // Exactly the exhaustive answer over the shared rows themselves.
                let qn = unit_query(&q, dim, "query").unwrap();
                let exhaustive =
                    shared.search(&qn, k, threshold, weight, simd::float_level(), false);
                let ids_a: Vec<&str> = a.iter().map(|h| h.0).collect();
                let ids_e: Vec<&str> = exhaustive
                    .iter()
                    .map(|s| shared.ids[s.index].as_str())
                    .collect();
                assert_eq!(ids_a, ids_e);
            }
        }
        // Removing moves the last slot's place, not a row.
        let gone: Vec<String> = (0..n).step_by(3).map(|i| format!("id{i}")).collect();
        shared.remove(&gone);
        own.remove(&gone);
        assert_eq!(shared.len(), own.len());
        for seed in 0..5 {
            let q = random(dim, 900 + seed);
            let a = shared.top_k(&q, 10, None).unwrap();
            let b = own.top_k(&q, 10, None).unwrap();
            let ids_a: Vec<&str> = a.iter().map(|h| h.0).collect();
            let ids_b: Vec<&str> = b.iter().map(|h| h.0).collect();
            assert_eq!(ids_a, ids_b);
        }
        assert_eq!(shared.get("id1").unwrap(), &rows[dim..2 * dim]);
    }

    #[test]
    fn shared_rows_are_checked_and_a_failed_add_changes_nothing() {
        let source: Arc<dyn SharedRows> = Arc::new(vec![1.0, 0.0, 0.6, 0.8, 0.0, 0.0, 3.0, 4.0]);
        let sources = [Arc::clone(&source)];
        let mut set = VectorSet::new(2).unwrap();
        let err = set
            .add_shared(&ids(0..2), &sources, &[0, 2], None)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the row for id \"id1\" (rows[1]) is a zero vector; cosine similarity is undefined for it"
        );
        let err = set
            .add_shared(&ids(0..2), &sources, &[0, 3], None)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("the row for id \"id1\" (rows[1]) has norm 5: shared rows must be unit"),
            "{err}"
        );
        let err = set
            .add_shared(&ids(0..1), &sources, &[4], None)
            .unwrap_err();
        assert!(err
            .to_string()
            .contains("rows[0] (id \"id0\") is 4, past the sources' 4 rows"));
        let odd: Arc<dyn SharedRows> = Arc::new(vec![1.0, 0.0, 1.0]);
        let err = set.add_shared(&ids(0..1), &[odd], &[0], None).unwrap_err();
        assert!(err.to_string().contains("not whole rows of dimension 2"));
        assert!(set.add_shared(&ids(0..2), &sources, &[0], None).is_err());
        assert!(set.is_empty() && !set.is_shared());
        // One set, one kind of storage.
        set.add_shared(&ids(0..2), &sources, &[0, 1], None).unwrap();
        let err = set.add(&ids(2..3), &[1.0, 0.0]).unwrap_err();
        assert!(err.to_string().contains("cannot take vectors of its own"));
        let mut own = VectorSet::new(2).unwrap();
        own.add(&ids(0..1), &[1.0, 0.0]).unwrap();
        let err = own
            .add_shared(&ids(1..2), &sources, &[0], None)
            .unwrap_err();
        assert!(err.to_string().contains("cannot take shared rows"));
        assert_eq!(set.top_k(&[0.0, 1.0], 1, None).unwrap()[0].0, "id1");
    }

    #[test]
    fn remove_keeps_search_consistent() {
        let dim = 64;
        let mut set = VectorSet::new(dim).unwrap();
        let data = random(2000 * dim, 9);
        set.add(&ids(0..2000), &data).unwrap();
        let gone: Vec<String> = (0..2000)
            .filter(|i: &usize| i.is_multiple_of(3))
            .map(|i| format!("id{i}"))
            .collect();
        assert_eq!(set.remove(&gone), gone.len());
        let q = random(dim, 4);
        let top = set.top_k(&q, 2000, None).unwrap();
        assert_eq!(top.len(), 2000 - gone.len());
        for (id, score) in top.iter().take(50) {
            let i: usize = id[2..].parse().unwrap();
            assert!(!i.is_multiple_of(3));
            let want = cosine(&data[i * dim..(i + 1) * dim], &q);
            assert!((f64::from(*score) - want).abs() < 1e-5);
        }
        let best = set.top_k(&q, 5, None).unwrap();
        let qn = unit_query(&q, dim, "q").unwrap();
        let exact = set.search(&qn, 5, None, 1.0, simd::float_level(), false);
        let e: Vec<&str> = exact.iter().map(|s| set.ids[s.index].as_str()).collect();
        let b: Vec<&str> = best.iter().map(|s| s.0).collect();
        assert_eq!(b, e);
    }

    fn cosine(a: &[f32], b: &[f32]) -> f64 {
        let d: f64 = a
            .iter()
            .zip(b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        d / na / nb
    }
}
