//! Create a store, append image-like records, gather a random batch, delete, compact.
//! Run: cargo run --release -p zrecord --example quickstart

use zrecord::{Mode, Sampler, Zrecord};

fn main() -> Result<(), zrecord::Error> {
    let dir = std::env::temp_dir().join(format!("zrecord-quickstart-{}", std::process::id()));
    const ITEM: usize = 3 * 64 * 64;
    let n = 2000;
    let images: Vec<u8> = (0..n * ITEM).map(|i| ((i % ITEM) / 48 + (i / ITEM) % 7) as u8).collect();

    let mut store = Zrecord::open(&dir)?;
    let first = store.append(&images, n, ITEM, None)?;
    store.sync()?;
    println!("appended {n} records at index {first}: {:?}", store.stats()?);

    let mut sampler = Sampler::new(u64::from(store.len()), 256, Mode::Iid, 42)?;
    let mut idxs = vec![0u64; 256];
    sampler.fill(&mut idxs);
    let mut batch = vec![0u8; 256 * ITEM];
    store.gather(&idxs, &mut batch, ITEM)?;
    for (k, &i) in idxs.iter().enumerate() {
        assert_eq!(&batch[k * ITEM..(k + 1) * ITEM], &images[i as usize * ITEM..(i as usize + 1) * ITEM]);
    }
    println!("gathered a random batch of 256, contents verified");

    store.delete(&[0, 10, 1999])?;
    store.compact()?;
    println!("after delete + compact: {:?}", store.stats()?);
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
