//! Decodes every image of a directory with each candidate decoder, one core, and resizes
//! the decoded pixels to 224 x 224 with each candidate resizer: megapixels per second,
//! median of five rounds. `cargo run --release -- DIR` (DIR holds .jpg, .png and .webp
//! files; docs/decisions/image-decoders.md says how the bench's set was made).

use std::path::Path;
use std::time::Instant;

type Decode = fn(&[u8]) -> (usize, usize, Vec<u8>);

fn zune_jpeg(b: &[u8]) -> (usize, usize, Vec<u8>) {
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::DecoderOptions;
    let opts = DecoderOptions::default().jpeg_set_out_colorspace(ColorSpace::RGB);
    let mut d = zune_jpeg::JpegDecoder::new_with_options(b, opts);
    let px = d.decode().expect("zune-jpeg");
    let (w, h) = d.dimensions().expect("dimensions");
    (w, h, px)
}

fn jpeg_decoder(b: &[u8]) -> (usize, usize, Vec<u8>) {
    let mut d = jpeg_decoder::Decoder::new(b);
    let px = d.decode().expect("jpeg-decoder");
    let info = d.info().expect("info");
    (usize::from(info.width), usize::from(info.height), px)
}

thread_local! {
    /// One decompressor per thread, reused (as a loader's worker would keep one).
    static TURBO: std::cell::RefCell<turbojpeg::Decompressor> =
        std::cell::RefCell::new(turbojpeg::Decompressor::new().expect("decompressor"));
}

/// libjpeg-turbo, the whole image or DCT-scaled by `scale` (as a crop's planner would ask
/// when the crop is at least twice the output).
fn turbo_scaled(b: &[u8], scale: turbojpeg::ScalingFactor) -> (usize, usize, Vec<u8>) {
    TURBO.with(|d| {
        let mut d = d.borrow_mut();
        d.set_scaling_factor(scale).expect("scale");
        let header = d.read_header(b).expect("header").scaled(scale);
        let mut img = turbojpeg::Image {
            pixels: vec![0u8; 3 * header.width * header.height],
            width: header.width,
            pitch: 3 * header.width,
            height: header.height,
            format: turbojpeg::PixelFormat::RGB,
        };
        d.decompress(b, img.as_deref_mut()).expect("turbojpeg");
        (img.width, img.height, img.pixels)
    })
}

fn turbo(b: &[u8]) -> (usize, usize, Vec<u8>) {
    turbo_scaled(b, turbojpeg::ScalingFactor::ONE)
}

fn turbo_half(b: &[u8]) -> (usize, usize, Vec<u8>) {
    let (w, h, px) = turbo_scaled(b, turbojpeg::ScalingFactor::ONE_HALF);
    // Counted as the full image's pixels: what the scaled decode stands in for.
    (w * 2, h * 2, px)
}

fn png_crate(b: &[u8]) -> (usize, usize, Vec<u8>) {
    let mut reader = png::Decoder::new(b).read_info().expect("png");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("png frame");
    (info.width as usize, info.height as usize, buf)
}

fn zune_png(b: &[u8]) -> (usize, usize, Vec<u8>) {
    let mut d = zune_png::PngDecoder::new(b);
    let px = d.decode_raw().expect("zune-png");
    let (w, h) = d.get_dimensions().expect("dimensions");
    (w, h, px)
}

fn webp(b: &[u8]) -> (usize, usize, Vec<u8>) {
    let mut d = image_webp::WebPDecoder::new(std::io::Cursor::new(b)).expect("webp");
    let (w, h) = d.dimensions();
    let mut buf = vec![0; d.output_buffer_size().expect("size")];
    d.read_image(&mut buf).expect("webp image");
    (w as usize, h as usize, buf)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Megapixels (of the full image) per second of `decode` over `files`, median of 5 rounds.
fn rate(files: &[Vec<u8>], decode: Decode) -> (f64, usize) {
    let mut pixels = 0usize;
    for f in files {
        let (w, h, _) = decode(f);
        pixels += w * h;
    }
    let rounds: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for f in files {
                std::hint::black_box(decode(f));
            }
            t.elapsed().as_secs_f64()
        })
        .collect();
    (pixels as f64 / 1e6 / median(rounds), pixels)
}

fn resize_fir(w: usize, h: usize, px: &[u8]) -> Vec<u8> {
    use fast_image_resize::images::{Image, ImageRef};
    use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
    let src = ImageRef::new(w as u32, h as u32, px, PixelType::U8x3).expect("src");
    let mut dst = Image::new(224, 224, PixelType::U8x3);
    let opts = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    Resizer::new().resize(&src, &mut dst, &opts).expect("resize");
    dst.into_vec()
}

fn resize_scalar(w: usize, h: usize, px: &[u8]) -> Vec<u8> {
    use rgb::FromSlice;
    let mut out = vec![0u8; 224 * 224 * 3];
    let mut r = resize::new(w, h, 224, 224, resize::Pixel::RGB8, resize::Type::Triangle).expect("resizer");
    r.resize(px.as_rgb(), out.as_rgb_mut()).expect("resize");
    out
}

fn main() {
    let dir = std::env::args().nth(1).expect("a directory of images");
    let read = |ext: &str| -> Vec<Vec<u8>> {
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .collect();
        names.sort();
        names.iter().map(|p: &std::path::PathBuf| std::fs::read(Path::new(p)).expect("read")).collect()
    };
    let (jpg, png, wbp) = (read("jpg"), read("png"), read("webp"));
    println!("| format | decoder | MP/s (one core) | vs the first |");
    println!("|---|---|---|---|");
    for (format, files, decoders) in [
        (
            "JPEG",
            &jpg,
            vec![
                ("zune-jpeg 0.4 (pure Rust, SIMD)", zune_jpeg as Decode),
                ("jpeg-decoder 0.3 (pure Rust)", jpeg_decoder),
                ("turbojpeg 1 (libjpeg-turbo 3, vendored)", turbo),
                ("turbojpeg, DCT-scaled 1/2 (MP of the full image)", turbo_half),
            ],
        ),
        ("PNG", &png, vec![("png 0.17", png_crate as Decode), ("zune-png 0.4", zune_png)]),
        ("WebP (lossy)", &wbp, vec![("image-webp 0.2", webp as Decode)]),
    ] {
        let mut first = None;
        for (name, d) in decoders {
            let (r, _) = rate(files, d);
            let base = *first.get_or_insert(r);
            println!("| {format} ({} files) | {name} | {r:.1} | {:.2}x |", files.len(), r / base);
        }
    }
    // Resizing the decoded JPEGs to 224 x 224 (bilinear/triangle).
    let decoded: Vec<(usize, usize, Vec<u8>)> = jpg.iter().map(|f| zune_jpeg(f)).collect();
    let mp: f64 = decoded.iter().map(|(w, h, _)| (w * h) as f64).sum::<f64>() / 1e6;
    println!();
    println!("| resizer (to 224 x 224, bilinear) | MP/s of source (one core) | vs the first |");
    println!("|---|---|---|");
    let mut first = None;
    for (name, f) in [
        ("fast_image_resize 5 (SIMD)", resize_fir as fn(usize, usize, &[u8]) -> Vec<u8>),
        ("resize 0.8 (scalar)", resize_scalar),
    ] {
        let rounds: Vec<f64> = (0..5)
            .map(|_| {
                let t = Instant::now();
                for (w, h, px) in &decoded {
                    std::hint::black_box(f(*w, *h, px));
                }
                t.elapsed().as_secs_f64()
            })
            .collect();
        let r = mp / median(rounds);
        let base = *first.get_or_insert(r);
        println!("| {name} | {r:.1} | {:.2}x |", r / base);
    }
}
