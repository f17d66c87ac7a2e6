//! Writing a resized image into its slot of a batch: mirrored left to right if the crop
//! says so, as the pipeline's dtype (uint8, or float32 normalised by mean and std) and
//! layout (HWC, or CHW: one plane per channel), in one pass.
//!
//! Spreading RGB triples into three planes is a loop the compiler vectorizes only with
//! byte shuffles, which the x86-64 baseline (SSE2) lacks: 93 µs for a 224 x 224 image
//! there, 3.9 µs compiled for AVX2 (7.3 mirrored), about a tenth of a crop's whole cost.
//! So the same code is compiled twice and AVX2's copy is chosen at run time where the CPU
//! has it; the `unsafe` here is only that call, as in `stream/permutation/simd.rs`.
#![allow(unsafe_code)]

use super::crop::{Dtype, Layout, Pipeline};

/// Writes `rgb`, rows of `width` RGB pixels, into `out` as `p`'s dtype and layout,
/// mirrored if `flip`.
pub(super) fn write_out(rgb: &[u8], p: &Pipeline, width: usize, flip: bool, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: `write_avx2` is `write_any` compiled for AVX2, and this CPU has AVX2, as
        // `is_x86_feature_detected!` just found; it takes the same safe arguments.
        return unsafe { write_avx2(rgb, p, width, flip, out) };
    }
    write_any(rgb, p, width, flip, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn write_avx2(rgb: &[u8], p: &Pipeline, width: usize, flip: bool, out: &mut [u8]) {
    write_any(rgb, p, width, flip, out)
}

#[inline(always)]
fn write_any(rgb: &[u8], p: &Pipeline, width: usize, flip: bool, out: &mut [u8]) {
    let n = rgb.len() / 3;
    match (p.dtype, p.layout) {
        (Dtype::U8, Layout::Hwc) => {
            for (src, dst) in rgb.chunks_exact(width * 3).zip(out.chunks_exact_mut(width * 3)) {
                if flip {
                    for (d, s) in dst.chunks_exact_mut(3).zip(src.chunks_exact(3).rev()) {
                        d.copy_from_slice(s);
                    }
                } else {
                    dst.copy_from_slice(src);
                }
            }
        }
        (Dtype::U8, Layout::Chw) => {
            let (r, rest) = out.split_at_mut(n);
            let (g, b) = rest.split_at_mut(n);
            let planes = r.chunks_exact_mut(width).zip(g.chunks_exact_mut(width).zip(b.chunks_exact_mut(width)));
            for (src, (r, (g, b))) in rgb.chunks_exact(width * 3).zip(planes) {
                if flip {
                    let mirrored = r.iter_mut().rev().zip(g.iter_mut().rev()).zip(b.iter_mut().rev());
                    for (px, ((r, g), b)) in src.chunks_exact(3).zip(mirrored) {
                        (*r, *g, *b) = (px[0], px[1], px[2]);
                    }
                } else {
                    for (px, ((r, g), b)) in src.chunks_exact(3).zip(r.iter_mut().zip(g).zip(b)) {
                        (*r, *g, *b) = (px[0], px[1], px[2]);
                    }
                }
            }
        }
        (Dtype::F32, layout) => {
            // (v / 255 - mean) / std as one multiply and one subtraction per value.
            let scale: [f32; 3] = core::array::from_fn(|c| 1.0 / (255.0 * p.std[c]));
            let shift: [f32; 3] = core::array::from_fn(|c| p.mean[c] / p.std[c]);
            // The pixel of `rgb` that output pixel `i` shows.
            let from = |i: usize| if flip { i - i % width + (width - 1 - i % width) } else { i };
            let value = |i: usize, c: usize| f32::from(rgb[from(i) * 3 + c]) * scale[c] - shift[c];
            for (k, slot) in out.chunks_exact_mut(4).enumerate() {
                let (i, c) = match layout {
                    Layout::Hwc => (k / 3, k % 3),
                    Layout::Chw => (k % n, k / n),
                };
                slot.copy_from_slice(&value(i, c).to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::crop::Geometry;

    fn pipeline(dtype: Dtype, layout: Layout) -> Pipeline {
        Pipeline {
            geometry: Geometry::Resize,
            width: 5,
            height: 2,
            flip: 0.0,
            dtype,
            layout,
            mean: [0.5, 0.25, 0.0],
            std: [0.5, 0.25, 1.0],
            max_pixels: 1 << 20,
        }
    }

    /// Every dtype, layout and mirroring against the definition, pixel by pixel, on both
    /// the AVX2 copy (where the CPU has it) and the portable one.
    #[test]
    fn every_dtype_layout_and_mirror_is_written_as_defined() {
        let (w, h) = (5usize, 2usize);
        let rgb: Vec<u8> = (0..w * h * 3).map(|v| (v * 17 % 256) as u8).collect();
        for dtype in [Dtype::U8, Dtype::F32] {
            for layout in [Layout::Hwc, Layout::Chw] {
                let p = pipeline(dtype, layout);
                for flip in [false, true] {
                    let size = if dtype == Dtype::U8 { 1 } else { 4 };
                    let (mut fast, mut portable) = (vec![0u8; w * h * 3 * size], vec![0u8; w * h * 3 * size]);
                    write_out(&rgb, &p, w, flip, &mut fast);
                    write_any(&rgb, &p, w, flip, &mut portable);
                    assert_eq!(fast, portable);
                    for (y, x, c) in (0..h).flat_map(|y| (0..w).flat_map(move |x| (0..3).map(move |c| (y, x, c)))) {
                        let sx = if flip { w - 1 - x } else { x };
                        let v = rgb[(y * w + sx) * 3 + c];
                        let at = match layout {
                            Layout::Hwc => (y * w + x) * 3 + c,
                            Layout::Chw => c * w * h + y * w + x,
                        };
                        if dtype == Dtype::U8 {
                            assert_eq!(fast[at], v, "{layout:?} flip {flip} ({y}, {x}, {c})");
                        } else {
                            let got = f32::from_le_bytes(fast[at * 4..at * 4 + 4].try_into().unwrap());
                            let want = (f32::from(v) / 255.0 - p.mean[c]) / p.std[c];
                            assert!((got - want).abs() < 1e-5, "{layout:?} flip {flip} ({y}, {x}, {c}): {got} {want}");
                        }
                    }
                }
            }
        }
    }
}
