//! Dot-product kernels with run-time CPU dispatch.
//!
//! The abi3 wheel is compiled for the x86_64 baseline (SSE2), so AVX2+FMA and AVX-512 code is
//! compiled into separate `#[target_feature]` functions and picked once, at first use, by
//! `is_x86_feature_detected!`. Every level computes one row with one fixed sequence of
//! operations, so a row scores the same whether it is scanned in bulk or re-scored alone.

use std::sync::OnceLock;

/// The instruction set a kernel runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// The vector levels are built only on x86_64; elsewhere every kernel is portable.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub enum Level {
    Portable,
    Avx2Fma,
    Avx512,
}

/// The instruction set the int8 dot products run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub enum Int8 {
    Portable,
    /// `vpmaddubsw`: its pairwise i16 sums saturate unless the unsigned operand stays below
    /// 128, so the query gets 7-bit codes.
    Avx2,
    /// `vpdpbusd` (AVX-512 VNNI) accumulates straight into i32: full 8-bit query codes.
    Vnni,
}

impl Int8 {
    /// The largest query code magnitude this kernel multiplies exactly; the query is offset by
    /// one more than this to make it unsigned.
    pub fn query_max_code(self) -> i32 {
        match self {
            Int8::Avx2 => 63,
            Int8::Portable | Int8::Vnni => 127,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Cpu {
    float: Level,
    int8: Int8,
}

fn cpu() -> Cpu {
    static CPU: OnceLock<Cpu> = OnceLock::new();
    *CPU.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Cpu {
    let float = if is_x86_feature_detected!("avx512f") {
        Level::Avx512
    } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        Level::Avx2Fma
    } else {
        Level::Portable
    };
    let int8 = if is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
    {
        Int8::Vnni
    } else if is_x86_feature_detected!("avx2") {
        Int8::Avx2
    } else {
        Int8::Portable
    };
    Cpu { float, int8 }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Cpu {
    Cpu {
        float: Level::Portable,
        int8: Int8::Portable,
    }
}

/// The float level this CPU runs.
pub fn float_level() -> Level {
    cpu().float
}

/// Float levels this CPU can run (for tests that compare them).
#[cfg(test)]
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
pub fn available_levels() -> Vec<Level> {
    let mut levels = vec![Level::Portable];
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            levels.push(Level::Avx2Fma);
        }
        if is_x86_feature_detected!("avx512f") {
            levels.push(Level::Avx512);
        }
    }
    levels
}

/// For each row `i` of `rows` (row-major, `dim` columns): `dots[i] = row·q`, `norms2[i] = |row|²`,
/// in one pass over the row.
pub fn fused_dot_norm2(
    level: Level,
    rows: &[f32],
    dim: usize,
    q: &[f32],
    dots: &mut [f32],
    norms2: &mut [f32],
) {
    let n = dots.len();
    assert!(q.len() == dim && norms2.len() == n && rows.len() == n * dim);
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Avx512` is only chosen when the CPU reports avx512f; the lengths were checked.
        Level::Avx512 => unsafe { x86::fused_avx512(rows, dim, q, dots, norms2) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Avx2Fma` is only chosen when the CPU reports avx2 and fma.
        Level::Avx2Fma => unsafe { x86::fused_avx2(rows, dim, q, dots, norms2) },
        _ => {
            for i in 0..n {
                let (d, s) = portable_fused(&rows[i * dim..(i + 1) * dim], q);
                dots[i] = d;
                norms2[i] = s;
            }
        }
    }
}

/// `out[i] = row_i·q` for each row.
pub fn dot_rows(level: Level, rows: &[f32], dim: usize, q: &[f32], out: &mut [f32]) {
    assert!(q.len() == dim && rows.len() == out.len() * dim);
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: see `fused_dot_norm2`.
        Level::Avx512 => unsafe { x86::dots_avx512(rows, dim, q, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: see `fused_dot_norm2`.
        Level::Avx2Fma => unsafe { x86::dots_avx2(rows, dim, q, out) },
        _ => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = portable_dot(&rows[i * dim..(i + 1) * dim], q);
            }
        }
    }
}

/// `row·q` for one row, bit-identical to what `dot_rows` gives for it at the same level.
pub fn dot(level: Level, row: &[f32], q: &[f32]) -> f32 {
    let mut out = [0.0_f32];
    dot_rows(level, row, row.len(), q, &mut out);
    out[0]
}

// Eight independent lanes: the compiler vectorises these with whatever the baseline offers.
fn portable_fused(row: &[f32], q: &[f32]) -> (f32, f32) {
    let mut dot = [0.0_f32; 8];
    let mut sq = [0.0_f32; 8];
    let (rc, rt) = (row.chunks_exact(8), row.chunks_exact(8).remainder());
    let (qc, qt) = (q.chunks_exact(8), q.chunks_exact(8).remainder());
    for (r, qq) in rc.zip(qc) {
        for l in 0..8 {
            dot[l] += r[l] * qq[l];
            sq[l] += r[l] * r[l];
        }
    }
    let mut d: f32 = dot.iter().sum();
    let mut s: f32 = sq.iter().sum();
    for (r, qq) in rt.iter().zip(qt) {
        d += r * qq;
        s += r * r;
    }
    (d, s)
}

fn portable_dot(row: &[f32], q: &[f32]) -> f32 {
    let mut dot = [0.0_f32; 8];
    let (rc, rt) = (row.chunks_exact(8), row.chunks_exact(8).remainder());
    let (qc, qt) = (q.chunks_exact(8), q.chunks_exact(8).remainder());
    for (r, qq) in rc.zip(qc) {
        for l in 0..8 {
            dot[l] += r[l] * qq[l];
        }
    }
    let mut d: f32 = dot.iter().sum();
    for (r, qq) in rt.iter().zip(qt) {
        d += r * qq;
    }
    d
}

/// The int8 kernel this CPU runs. The int8 prefilter pays off only on a vector one: the
/// portable loop is slower than the f32 scan it would save.
pub fn int8_level() -> Int8 {
    #[cfg(test)]
    if let Some(level) = INT8_LEVEL_FOR_TESTS.with(std::cell::Cell::get) {
        return level;
    }
    cpu().int8
}

#[cfg(test)]
thread_local! {
    /// Lets a test run the int8 path of a lower level than the CPU's on this thread.
    static INT8_LEVEL_FOR_TESTS: std::cell::Cell<Option<Int8>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with the int8 kernels of `level` on this thread (a level the CPU supports).
#[cfg(test)]
pub fn with_int8_level<T>(level: Int8, f: impl FnOnce() -> T) -> T {
    INT8_LEVEL_FOR_TESTS.with(|l| l.set(Some(level)));
    let out = f();
    INT8_LEVEL_FOR_TESTS.with(|l| l.set(None));
    out
}

/// The int8 levels this CPU can run, the best first.
#[cfg(test)]
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
pub fn available_int8_levels() -> Vec<Int8> {
    let mut levels = vec![cpu().int8];
    #[cfg(target_arch = "x86_64")]
    if cpu().int8 == Int8::Vnni && is_x86_feature_detected!("avx2") {
        levels.push(Int8::Avx2);
    }
    levels
}

/// Bit `i` set when `values[i] >= floor` (at most 16 values; false for NaN), in one compare.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn ge_mask16_avx512(values: &[f32], floor: f32) -> u32 {
    use std::arch::x86_64::*;
    assert!(values.len() <= 16);
    let lanes = ((1_u32 << values.len()) - 1) as __mmask16;
    let v = _mm512_maskz_loadu_ps(lanes, values.as_ptr());
    u32::from(_mm512_mask_cmp_ps_mask::<_CMP_GE_OQ>(
        lanes,
        v,
        _mm512_set1_ps(floor),
    ))
}

/// Which rows an int8 kernel call scores: `out[i]` is row `rows.row(i)`.
pub trait Rows: Copy {
    fn count(self) -> usize;
    fn row(self, i: usize) -> usize;
    /// Whether every row is below `total`.
    fn within(self, total: usize) -> bool;
    /// The first row when the rows are consecutive (the x86_64 kernels read such rows as
    /// one stream).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn consecutive_from(self) -> Option<usize>;
}

/// Rows `start..start + len`: a block of a full-width pass.
#[derive(Clone, Copy)]
pub struct Block {
    pub start: usize,
    pub len: usize,
}

impl Rows for Block {
    #[inline(always)]
    fn count(self) -> usize {
        self.len
    }

    #[inline(always)]
    fn row(self, i: usize) -> usize {
        self.start + i
    }

    fn within(self, total: usize) -> bool {
        self.start + self.len <= total
    }

    fn consecutive_from(self) -> Option<usize> {
        Some(self.start)
    }
}

/// The listed rows: those a stage of a staged scan kept.
impl Rows for &[u32] {
    #[inline(always)]
    fn count(self) -> usize {
        self.len()
    }

    #[inline(always)]
    fn row(self, i: usize) -> usize {
        self[i] as usize
    }

    fn within(self, total: usize) -> bool {
        self.iter().all(|&r| (r as usize) < total)
    }

    fn consecutive_from(self) -> Option<usize> {
        None
    }
}

/// Asks for the cache line holding `codes[offset]` ahead of a gathered read; a no-op where there
/// is no prefetch instruction. `wrapping_add`: a prefetch never faults, but the pointer
/// arithmetic must not claim to stay in bounds.
#[inline(always)]
pub fn prefetch_line(codes: *const i8, offset: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no architectural effect and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            codes.wrapping_add(offset),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (codes, offset);
}

/// `out[i] = Σ_{j in cols} q_u8[j] · codes[rows.row(i)·stride + j]`: the int8 dot products of
/// some rows over a range of columns (its bounds multiples of 64).
///
/// The query is offset to unsigned (`code + max + 1`, see [`Int8::query_max_code`]) because
/// both `vpdpbusd` and `vpmaddubsw` multiply unsigned by signed bytes; callers subtract
/// `(max + 1) · Σ codes` to recover the signed product.
///
/// # Panics
/// When the shapes disagree or a row is out of range.
pub fn i8_dot_rows<R: Rows>(
    codes: &[i8],
    stride: usize,
    rows: R,
    cols: std::ops::Range<usize>,
    q_u8: &[u8],
    out: &mut [i32],
) {
    let n = rows.count();
    assert!(
        stride.is_multiple_of(64)
            && cols.start.is_multiple_of(64)
            && cols.end.is_multiple_of(64)
            && cols.start <= cols.end
            && cols.end <= stride
            && q_u8.len() == stride
            && n == out.len()
            && codes.len().is_multiple_of(stride)
    );
    if n == 0 {
        return;
    }
    // The kernels read rows without bounds checks.
    assert!(rows.within(codes.len() / stride), "row index out of range");
    if cols.is_empty() {
        out.fill(0);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    match int8_level() {
        Int8::Vnni => {
            // SAFETY: the CPU reports avx512f, avx512bw and avx512vnni; rows and columns were
            // checked to lie inside `codes` and `q_u8` above.
            match rows.consecutive_from() {
                Some(start) if stride == cols.len() && stride <= 128 => unsafe {
                    x86::i8_dots_vnni_packed(codes, stride, start, q_u8, out)
                },
                _ => unsafe { x86::i8_dots_vnni(codes, stride, rows, cols, q_u8, out) },
            }
            return;
        }
        Int8::Avx2 => {
            // The callers quantise the query to `query_max_code` (checked here in tests only:
            // this runs once per block of rows).
            debug_assert!(q_u8.iter().all(|&q| q < 128));
            // SAFETY: the CPU reports avx2; rows and columns checked above.
            unsafe { x86::i8_dots_avx2(codes, stride, rows, cols, q_u8, out) };
            return;
        }
        Int8::Portable => {}
    }
    for (i, o) in out.iter_mut().enumerate() {
        let row = &codes[rows.row(i) * stride..][cols.clone()];
        *o = row
            .iter()
            .zip(&q_u8[cols.clone()])
            .map(|(&c, &q)| i32::from(c) * i32::from(q))
            .sum();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Rows;

    #[inline]
    fn tail_mask(left: usize) -> __mmask16 {
        if left >= 16 {
            0xFFFF
        } else {
            ((1u32 << left) - 1) as __mmask16
        }
    }

    /// Sums each of four vectors: `[Σa0, Σa1, Σa2, Σa3]`, one transposing reduction instead of
    /// four separate ones.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn hsum4_ps(a: [__m512; 4]) -> [f32; 4] {
        let half = |v: __m512| -> __m256 {
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
            _mm256_add_ps(_mm512_castps512_ps256(v), hi)
        };
        let x = _mm256_hadd_ps(half(a[0]), half(a[1]));
        let y = _mm256_hadd_ps(half(a[2]), half(a[3]));
        let z = _mm256_hadd_ps(x, y);
        let sum = _mm_add_ps(_mm256_castps256_ps128(z), _mm256_extractf128_ps(z, 1));
        let mut out = [0.0_f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), sum);
        out
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn hsum4_epi32(a: [__m512i; 4]) -> [i32; 4] {
        let half = |v: __m512i| -> __m256i {
            _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1))
        };
        hsum4_epi32_256(a.map(half))
    }

    /// Dot products of four rows with `q`. Two accumulators per row keep enough independent
    /// FMA chains in flight for two 512-bit FMA pipes; the query loads are shared by the rows.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn dot4_avx512(r: [*const f32; 4], q: *const f32, dim: usize) -> [f32; 4] {
        let mut a = [_mm512_setzero_ps(); 4];
        let mut b = [_mm512_setzero_ps(); 4];
        let mut j = 0;
        while j + 32 <= dim {
            let qa = _mm512_loadu_ps(q.add(j));
            let qb = _mm512_loadu_ps(q.add(j + 16));
            for t in 0..4 {
                a[t] = _mm512_fmadd_ps(_mm512_loadu_ps(r[t].add(j)), qa, a[t]);
                b[t] = _mm512_fmadd_ps(_mm512_loadu_ps(r[t].add(j + 16)), qb, b[t]);
            }
            j += 32;
        }
        while j < dim {
            // Masked loads never touch the lanes past the row's end.
            let m = tail_mask(dim - j);
            let qa = _mm512_maskz_loadu_ps(m, q.add(j));
            for t in 0..4 {
                a[t] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r[t].add(j)), qa, a[t]);
            }
            j += 16;
        }
        for t in 0..4 {
            a[t] = _mm512_add_ps(a[t], b[t]);
        }
        hsum4_ps(a)
    }

    /// `(row·q, |row|²)` of four rows in one pass.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn fused4_avx512(r: [*const f32; 4], q: *const f32, dim: usize) -> ([f32; 4], [f32; 4]) {
        let mut d = [_mm512_setzero_ps(); 4];
        let mut e = [_mm512_setzero_ps(); 4];
        let mut s = [_mm512_setzero_ps(); 4];
        let mut u = [_mm512_setzero_ps(); 4];
        let mut j = 0;
        while j + 32 <= dim {
            let qa = _mm512_loadu_ps(q.add(j));
            let qb = _mm512_loadu_ps(q.add(j + 16));
            for t in 0..4 {
                let x = _mm512_loadu_ps(r[t].add(j));
                let y = _mm512_loadu_ps(r[t].add(j + 16));
                d[t] = _mm512_fmadd_ps(x, qa, d[t]);
                e[t] = _mm512_fmadd_ps(y, qb, e[t]);
                s[t] = _mm512_fmadd_ps(x, x, s[t]);
                u[t] = _mm512_fmadd_ps(y, y, u[t]);
            }
            j += 32;
        }
        while j < dim {
            let m = tail_mask(dim - j);
            let qa = _mm512_maskz_loadu_ps(m, q.add(j));
            for t in 0..4 {
                let x = _mm512_maskz_loadu_ps(m, r[t].add(j));
                d[t] = _mm512_fmadd_ps(x, qa, d[t]);
                s[t] = _mm512_fmadd_ps(x, x, s[t]);
            }
            j += 16;
        }
        for t in 0..4 {
            d[t] = _mm512_add_ps(d[t], e[t]);
            s[t] = _mm512_add_ps(s[t], u[t]);
        }
        (hsum4_ps(d), hsum4_ps(s))
    }

    /// Pointers to rows `i..i+4`, repeating the last row past `n`: every row then goes through
    /// the same four-row kernel, so its score never depends on its neighbours or position.
    #[inline]
    unsafe fn four_rows(base: *const f32, dim: usize, i: usize, n: usize) -> [*const f32; 4] {
        let row = |t: usize| base.add((i + t).min(n - 1) * dim);
        [row(0), row(1), row(2), row(3)]
    }

    #[target_feature(enable = "avx512f,avx2")]
    pub unsafe fn fused_avx512(
        rows: &[f32],
        dim: usize,
        q: &[f32],
        dots: &mut [f32],
        norms2: &mut [f32],
    ) {
        let n = dots.len();
        let mut i = 0;
        while i < n {
            let (d, s) = fused4_avx512(four_rows(rows.as_ptr(), dim, i, n), q.as_ptr(), dim);
            let m = 4.min(n - i);
            dots[i..i + m].copy_from_slice(&d[..m]);
            norms2[i..i + m].copy_from_slice(&s[..m]);
            i += 4;
        }
    }

    #[target_feature(enable = "avx512f,avx2")]
    pub unsafe fn dots_avx512(rows: &[f32], dim: usize, q: &[f32], out: &mut [f32]) {
        let n = out.len();
        let mut i = 0;
        while i < n {
            let d = dot4_avx512(four_rows(rows.as_ptr(), dim, i, n), q.as_ptr(), dim);
            out[i..(i + 4).min(n)].copy_from_slice(&d[..4.min(n - i)]);
            i += 4;
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum256(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fused_row_avx2(r: *const f32, q: *const f32, dim: usize) -> (f32, f32) {
        let (mut d0, mut d1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut j = 0;
        while j + 16 <= dim {
            let a = _mm256_loadu_ps(r.add(j));
            let b = _mm256_loadu_ps(r.add(j + 8));
            d0 = _mm256_fmadd_ps(a, _mm256_loadu_ps(q.add(j)), d0);
            d1 = _mm256_fmadd_ps(b, _mm256_loadu_ps(q.add(j + 8)), d1);
            s0 = _mm256_fmadd_ps(a, a, s0);
            s1 = _mm256_fmadd_ps(b, b, s1);
            j += 16;
        }
        let mut d = hsum256(_mm256_add_ps(d0, d1));
        let mut s = hsum256(_mm256_add_ps(s0, s1));
        while j < dim {
            let x = *r.add(j);
            d += x * *q.add(j);
            s += x * x;
            j += 1;
        }
        (d, s)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_row_avx2(r: *const f32, q: *const f32, dim: usize) -> f32 {
        let (mut d0, mut d1, mut d2, mut d3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut j = 0;
        while j + 32 <= dim {
            d0 = _mm256_fmadd_ps(_mm256_loadu_ps(r.add(j)), _mm256_loadu_ps(q.add(j)), d0);
            d1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(r.add(j + 8)),
                _mm256_loadu_ps(q.add(j + 8)),
                d1,
            );
            d2 = _mm256_fmadd_ps(
                _mm256_loadu_ps(r.add(j + 16)),
                _mm256_loadu_ps(q.add(j + 16)),
                d2,
            );
            d3 = _mm256_fmadd_ps(
                _mm256_loadu_ps(r.add(j + 24)),
                _mm256_loadu_ps(q.add(j + 24)),
                d3,
            );
            j += 32;
        }
        while j + 8 <= dim {
            d0 = _mm256_fmadd_ps(_mm256_loadu_ps(r.add(j)), _mm256_loadu_ps(q.add(j)), d0);
            j += 8;
        }
        let mut d = hsum256(_mm256_add_ps(_mm256_add_ps(d0, d1), _mm256_add_ps(d2, d3)));
        while j < dim {
            d += *r.add(j) * *q.add(j);
            j += 1;
        }
        d
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fused_avx2(
        rows: &[f32],
        dim: usize,
        q: &[f32],
        dots: &mut [f32],
        norms2: &mut [f32],
    ) {
        for i in 0..dots.len() {
            let (d, s) = fused_row_avx2(rows.as_ptr().add(i * dim), q.as_ptr(), dim);
            *dots.get_unchecked_mut(i) = d;
            *norms2.get_unchecked_mut(i) = s;
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dots_avx2(rows: &[f32], dim: usize, q: &[f32], out: &mut [f32]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = dot_row_avx2(rows.as_ptr().add(i * dim), q.as_ptr(), dim);
        }
    }

    const PREFETCH_ROWS: usize = 16;

    /// The sums of the eight i32 lanes of each of four vectors: one transposing reduction.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn hsum4_epi32_256(a: [__m256i; 4]) -> [i32; 4] {
        let ab = _mm256_hadd_epi32(a[0], a[1]);
        let cd = _mm256_hadd_epi32(a[2], a[3]);
        let abcd = _mm256_hadd_epi32(ab, cd);
        let sums = _mm_add_epi32(
            _mm256_castsi256_si128(abcd),
            _mm256_extracti128_si256::<1>(abcd),
        );
        let mut out = [0_i32; 4];
        _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, sums);
        out
    }

    /// The dot products of four rows with the query over `width` columns (a multiple of 64).
    ///
    /// `vpmaddubsw` multiplies the unsigned query bytes by the signed codes and adds pairs into
    /// i16 (exact: |pair| <= 2·127·128 < 2^15 with query bytes below 128); `vpmaddwd` by ones
    /// widens the pairs into the i32 accumulators before two of them could overflow.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot4_avx2(r: [*const i8; 4], q: *const u8, width: usize) -> [i32; 4] {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut j = 0;
        while j < width {
            let qa = _mm256_loadu_si256(q.add(j) as *const __m256i);
            let qb = _mm256_loadu_si256(q.add(j + 32) as *const __m256i);
            for t in 0..4 {
                let x = _mm256_loadu_si256(r[t].add(j) as *const __m256i);
                let y = _mm256_loadu_si256(r[t].add(j + 32) as *const __m256i);
                let px = _mm256_madd_epi16(_mm256_maddubs_epi16(qa, x), ones);
                let py = _mm256_madd_epi16(_mm256_maddubs_epi16(qb, y), ones);
                acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(px, py));
            }
            j += 64;
        }
        hsum4_epi32_256(acc)
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn i8_dots_avx2<R: Rows>(
        codes: &[i8],
        stride: usize,
        rows: R,
        cols: std::ops::Range<usize>,
        q_u8: &[u8],
        out: &mut [i32],
    ) {
        let q = q_u8.as_ptr().add(cols.start);
        let width = cols.len();
        let base = codes.as_ptr().add(cols.start);
        let n = rows.count();
        let row = |i: usize| base.add(rows.row(i) * stride);
        // Four rows per step share each query load.
        let mut i = 0;
        for group in out.chunks_exact_mut(4) {
            let r = [row(i), row(i + 1), row(i + 2), row(i + 3)];
            group.copy_from_slice(&dot4_avx2(r, q, width));
            i += 4;
        }
        if i < n {
            // The last rows, the final one repeated to fill the step.
            let r = [0, 1, 2, 3].map(|t| row((i + t).min(n - 1)));
            let sums = dot4_avx2(r, q, width);
            out[i..].copy_from_slice(&sums[..n - i]);
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2")]
    pub unsafe fn i8_dots_vnni<R: Rows>(
        codes: &[i8],
        stride: usize,
        rows: R,
        cols: std::ops::Range<usize>,
        q_u8: &[u8],
        out: &mut [i32],
    ) {
        let q = q_u8.as_ptr().add(cols.start);
        let width = cols.len();
        let base = codes.as_ptr().add(cols.start);
        let n = rows.count();
        let mut i = 0;
        while i < n {
            // Four rows per step share each query load; two accumulators per row keep eight
            // `vpdpbusd` chains in flight. Rows past `n` repeat the last one (integer sums are
            // exact, so this is only about staying in bounds).
            let row = |t: usize| base.add(rows.row((i + t).min(n - 1)) * stride);
            let r = [row(0), row(1), row(2), row(3)];
            let mut a = [_mm512_setzero_si512(); 4];
            let mut b = [_mm512_setzero_si512(); 4];
            // One core's DRAM bandwidth is bounded by its misses in flight; asking for the rows
            // PREFETCH_ROWS ahead keeps more of them in flight than the hardware prefetcher does.
            // `wrapping_add`: the address may lie past the end, which a prefetch tolerates.
            for t in 0..4 {
                if i + PREFETCH_ROWS + t < n {
                    let ahead = base.wrapping_add(rows.row(i + PREFETCH_ROWS + t) * stride);
                    let mut p = 0;
                    while p < width {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(p));
                        p += 64;
                    }
                }
            }
            let mut j = 0;
            while j + 128 <= width {
                let qa = _mm512_loadu_si512(q.add(j) as *const _);
                let qb = _mm512_loadu_si512(q.add(j + 64) as *const _);
                for t in 0..4 {
                    let x = _mm512_loadu_si512(r[t].add(j) as *const _);
                    let y = _mm512_loadu_si512(r[t].add(j + 64) as *const _);
                    a[t] = _mm512_dpbusd_epi32(a[t], qa, x);
                    b[t] = _mm512_dpbusd_epi32(b[t], qb, y);
                }
                j += 128;
            }
            if j < width {
                let qa = _mm512_loadu_si512(q.add(j) as *const _);
                for t in 0..4 {
                    let x = _mm512_loadu_si512(r[t].add(j) as *const _);
                    a[t] = _mm512_dpbusd_epi32(a[t], qa, x);
                }
            }
            for t in 0..4 {
                a[t] = _mm512_add_epi32(a[t], b[t]);
            }
            let sums = hsum4_epi32(a);
            if i + 4 <= n {
                // A fixed-size copy is one store; `copy_from_slice` of a variable length was a
                // call to memcpy per four rows.
                out[i..i + 4].copy_from_slice(&sums);
            } else {
                out[i..].copy_from_slice(&sums[..n - i]);
            }
            i += 4;
        }
    }

    /// The sums of each of sixteen vectors, in order: lane `r` of the result is `Σ a[r]`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn hsum16_epi32(a: [__m512i; 16]) -> __m512i {
        // Round 1: vector k holds row 2k in its 128-bit blocks 0-1 and row 2k+1 in blocks 2-3.
        let w: [__m512i; 8] = std::array::from_fn(|k| {
            let (x, y) = (a[2 * k], a[2 * k + 1]);
            _mm512_add_epi32(
                _mm512_shuffle_i32x4::<0x44>(x, y),
                _mm512_shuffle_i32x4::<0xEE>(x, y),
            )
        });
        // Round 2: block j of vector m holds 4 partial sums of row 4m + j.
        let x: [__m512i; 4] = std::array::from_fn(|m| {
            let (p, q) = (w[2 * m], w[2 * m + 1]);
            _mm512_add_epi32(
                _mm512_shuffle_i32x4::<0x88>(p, q),
                _mm512_shuffle_i32x4::<0xDD>(p, q),
            )
        });
        // Round 3: block j of vector p holds 2 partial sums of row 8p + j, then 2 of 8p + 4 + j.
        let y: [__m512i; 2] = std::array::from_fn(|p| {
            let (u, v) = (x[2 * p], x[2 * p + 1]);
            _mm512_add_epi32(_mm512_unpacklo_epi64(u, v), _mm512_unpackhi_epi64(u, v))
        });
        // Round 4: block j holds rows j, 4 + j, 8 + j, 12 + j.
        let (u, v) = (_mm512_castsi512_ps(y[0]), _mm512_castsi512_ps(y[1]));
        let z = _mm512_add_epi32(
            _mm512_castps_si512(_mm512_shuffle_ps::<0x88>(u, v)),
            _mm512_castps_si512(_mm512_shuffle_ps::<0xDD>(u, v)),
        );
        // Lane 4j + c holds row 4c + j: back to row order.
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_epi32(order, z)
    }

    /// [`i8_dots_vnni`] for short rows stored back to back (`width` = `stride` <= 128): sixteen
    /// rows per step reduced together, and no software prefetch (one contiguous stream is what
    /// the hardware prefetcher follows best).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn i8_dots_vnni_packed(
        codes: &[i8],
        stride: usize,
        start: usize,
        q_u8: &[u8],
        out: &mut [i32],
    ) {
        let q = q_u8.as_ptr();
        let base = codes.as_ptr().add(start * stride);
        let n = out.len();
        let qa = _mm512_loadu_si512(q as *const _);
        let qb = if stride > 64 {
            _mm512_loadu_si512(q.add(64) as *const _)
        } else {
            _mm512_setzero_si512()
        };
        let mut i = 0;
        while i < n {
            let acc: [__m512i; 16] = std::array::from_fn(|t| {
                // Rows past `n` repeat the last one (their sums are not stored).
                let r = base.add((i + t).min(n - 1) * stride);
                let a = _mm512_dpbusd_epi32(
                    _mm512_setzero_si512(),
                    qa,
                    _mm512_loadu_si512(r as *const _),
                );
                if stride > 64 {
                    _mm512_dpbusd_epi32(a, qb, _mm512_loadu_si512(r.add(64) as *const _))
                } else {
                    a
                }
            });
            let sums = hsum16_epi32(acc);
            let m = 16.min(n - i);
            let mask = if m == 16 {
                0xFFFF
            } else {
                ((1u32 << m) - 1) as __mmask16
            };
            _mm512_mask_storeu_epi32(out.as_mut_ptr().add(i), mask, sums);
            i += 16;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n * dim)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    #[test]
    fn every_level_agrees_with_f64_on_every_tail_length() {
        for dim in [1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 384] {
            let rows = data(5, dim, dim as u64);
            let q = data(1, dim, 99);
            for level in available_levels() {
                let mut dots = vec![0.0; 5];
                let mut norms = vec![0.0; 5];
                fused_dot_norm2(level, &rows, dim, &q, &mut dots, &mut norms);
                let mut plain = vec![0.0; 5];
                dot_rows(level, &rows, dim, &q, &mut plain);
                for i in 0..5 {
                    let row = &rows[i * dim..(i + 1) * dim];
                    let d: f64 = row.iter().zip(&q).map(|(a, b)| f64::from(a * b)).sum();
                    let s: f64 = row.iter().map(|a| f64::from(a * a)).sum();
                    assert!((f64::from(dots[i]) - d).abs() < 1e-4, "{level:?} dim {dim}");
                    assert!(
                        (f64::from(plain[i]) - d).abs() < 1e-4,
                        "{level:?} dim {dim}"
                    );
                    assert!(
                        (f64::from(norms[i]) - s).abs() < 1e-4,
                        "{level:?} dim {dim}"
                    );
                    assert_eq!(dot(level, row, &q).to_bits(), plain[i].to_bits());
                }
            }
        }
    }

    #[test]
    fn int8_dots_are_exact() {
        for (stride, n) in [
            (64, 1),
            (128, 7),
            (192, 9),
            (384, 4),
            (128, 33),
            (448, 50),
            (64, 40),
        ] {
            int8_case(stride, n);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn ge_mask_matches_the_scalar_compare() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        let values = [
            0.5,
            -1.0,
            f32::NAN,
            0.25,
            0.25,
            f32::INFINITY,
            -0.0,
            0.0,
            1e-9,
            -1e-9,
            0.3,
            0.2,
            0.1,
            f32::NEG_INFINITY,
            0.25,
            0.7,
        ];
        for len in 0..=16 {
            for floor in [0.25, 0.0, -0.0, f32::NEG_INFINITY, 2.0] {
                let group = &values[..len];
                let want = group
                    .iter()
                    .enumerate()
                    .fold(0, |m, (i, &u)| m | u32::from(u >= floor) << i);
                // SAFETY: avx512f was detected above.
                let got = unsafe { ge_mask16_avx512(group, floor) };
                assert_eq!(got, want, "len {len} floor {floor}");
            }
        }
    }

    /// The AVX2 kernel on a CPU that runs the VNNI one (a machine without VNNI takes it).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_int8_dots_are_exact_too() {
        if !is_x86_feature_detected!("avx2") {
            return;
        }
        for (stride, n) in [(64, 1), (128, 7), (384, 9), (448, 50)] {
            let codes: Vec<i8> = (0..n * stride).map(|i| ((i * 37) % 256) as i8).collect();
            // 7-bit query bytes: the most `vpmaddubsw` multiplies without saturating.
            let q: Vec<u8> = (0..stride)
                .map(|i| {
                    if i % 5 == 0 {
                        127
                    } else {
                        (i * 11 % 128) as u8
                    }
                })
                .collect();
            let rows: Vec<u32> = (0..n as u32).rev().collect();
            for cols in [0..stride, 0..64, stride - 64..stride] {
                let mut out = vec![0; n];
                // SAFETY: avx2 was detected above; rows and columns lie inside the data.
                unsafe {
                    x86::i8_dots_avx2(&codes, stride, rows.as_slice(), cols.clone(), &q, &mut out)
                };
                for (o, &r) in out.iter().zip(&rows) {
                    let want: i32 = cols
                        .clone()
                        .map(|j| i32::from(codes[r as usize * stride + j]) * i32::from(q[j]))
                        .sum();
                    assert_eq!(*o, want, "row {r} cols {cols:?}");
                }
            }
        }
    }

    fn int8_case(stride: usize, n: usize) {
        let codes: Vec<i8> = (0..n * stride).map(|i| ((i * 37) % 256) as i8).collect();
        // The extremes: every query byte the kernel allows against codes -128..=127.
        let q_max = int8_level().query_max_code() * 2 + 1;
        let q: Vec<u8> = (0..stride)
            .map(|i| if i % 5 == 0 { q_max } else { (i as i32 * 11) % (q_max + 1) } as u8)
            .collect();
        // Every row in order, the rows backwards, and each 64-column range.
        let forward: Vec<u32> = (0..n as u32).collect();
        let backward: Vec<u32> = forward.iter().rev().copied().collect();
        let ranges: Vec<std::ops::Range<usize>> = std::iter::once(0..stride)
            .chain((0..stride).step_by(64).map(|c| c..c + 64))
            .collect();
        for rows in [&forward, &backward] {
            for cols in &ranges {
                let mut out = vec![0; n];
                i8_dot_rows(&codes, stride, rows.as_slice(), cols.clone(), &q, &mut out);
                if rows == &forward {
                    let mut block = vec![0; n];
                    let all = Block { start: 0, len: n };
                    i8_dot_rows(&codes, stride, all, cols.clone(), &q, &mut block);
                    assert_eq!(block, out);
                }
                for (o, &r) in out.iter().zip(rows.iter()) {
                    let want: i32 = cols
                        .clone()
                        .map(|j| i32::from(codes[r as usize * stride + j]) * i32::from(q[j]))
                        .sum();
                    assert_eq!(*o, want, "row {r} cols {cols:?}");
                }
            }
        }
    }
}
