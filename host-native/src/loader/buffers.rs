//! Field buffers that consumers give back, for later batches to fill again: the
//! [`BufferPool`] every gather takes its buffers from.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::lock;
use crate::Error;

/// A buffer of `len` zero bytes with room for `cap`, in memory the allocator asks the
/// kernel for already zeroed (`calloc`: a fresh mapping is not written by this process at
/// all; the kernel zeroes each page as it is first touched, by whichever thread fills it),
/// instead of allocating and then writing every byte with zeros before the gather writes
/// it again. (Advising the buffer as huge pages was tried and dropped: with the kernel's
/// `defrag=madvise`, 200 new batches of 3 MiB took 1.78 s of system time against 0.33 s
/// without the advice: `docs/decisions/raw-gather.md`.)
fn zeroed(len: usize, cap: usize) -> Result<Vec<u8>, Error> {
    let cap = cap.max(len).max(1);
    let layout = std::alloc::Layout::array::<u8>(cap).map_err(|_| Error::OutOfMemory)?;
    // SAFETY: `layout` has a non-zero size (cap >= 1).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(Error::OutOfMemory);
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `[u8; cap]`
    // (size `cap`, alignment 1, what a Vec<u8> of capacity `cap` deallocates with), its
    // `cap` bytes are initialised (zeroed), and `len <= cap`.
    Ok(unsafe { Vec::from_raw_parts(ptr, len, cap) })
}

/// Field buffers that consumers gave back, for later batches to fill again.
///
/// A fresh buffer per batch costs more than the gather on large raw batches: the allocator
/// maps new pages and the kernel zeroes each one on its first touch (a new buffer is taken
/// zeroed from the kernel: [`zeroed`]). A consumer that is done with a batch's buffer (the Python binding does so
/// when the last array viewing it is freed) hands it to [`BufferPool::give`], and a later
/// batch with a field that fits it takes it instead of allocating. A buffer is only ever
/// given back by its owner, so no batch a caller still holds is written again.
///
/// A ragged field's buffer changes size from batch to batch, so buffers are matched by
/// capacity, not length: a new one gets [`BufferPool::ROOM`] to spare (address space: the
/// kernel backs pages only once they are touched), and a request takes the smallest that
/// holds it, unless that is over twice what it asks. When the pool is full, the buffer
/// given back longest ago goes, so buffers that nothing fits any more cannot crowd out
/// those that are reused.
#[derive(Debug)]
pub struct BufferPool {
    /// Oldest first.
    free: Mutex<Vec<Vec<u8>>>,
    /// Buffers kept at most.
    keep: usize,
    /// Buffers made new because none given back fitted.
    allocated: AtomicUsize,
}

impl Default for BufferPool {
    fn default() -> Self {
        BufferPool::keeping(Self::KEEP)
    }
}

impl BufferPool {
    /// Buffers a pool keeps at most unless told more ([`BufferPool::keeping`]), and bytes
    /// any pool keeps at most (by capacity).
    const KEEP: usize = 16;
    const KEEP_BYTES: usize = 512 << 20;

    /// A pool that keeps up to `buffers` buffers (at least [`BufferPool::KEEP`]). A loader
    /// holds a buffer per field of every batch in flight (the workers', the queued, the
    /// consumer's) and sizes its pool to that: with 3 fields and 4 workers about 30 at
    /// once, and a pool of 16 dropped buffers the next batches needed (a 3-field loader
    /// took 30-75% more page faults than a 2-field one).
    pub fn keeping(buffers: usize) -> BufferPool {
        BufferPool { free: Mutex::default(), keep: buffers.max(Self::KEEP), allocated: AtomicUsize::new(0) }
    }

    /// A new buffer's spare capacity, as a fraction of its length: 1 / ROOM. The sum of a
    /// batch of 256 ragged samples of 256 to 768 tokens varies by about 2% from batch to
    /// batch; an eighth holds that many times over.
    const ROOM: usize = 8;

    /// A buffer of exactly `len` bytes: a given-back one (holding an earlier batch's bytes:
    /// the caller overwrites or clears every byte), or a new zeroed one. Its second value
    /// says whether it was reused.
    pub fn take(&self, len: usize) -> Result<(Vec<u8>, bool), Error> {
        let mut free = lock(&self.free);
        let fits = |b: &Vec<u8>| b.capacity() >= len && b.capacity() / 2 <= len;
        let best = free.iter().enumerate().filter(|(_, b)| fits(b)).min_by_key(|(_, b)| b.capacity()).map(|(k, _)| k);
        if let Some(k) = best {
            let mut buf = free.remove(k);
            drop(free);
            // Within the capacity: no reallocation; growing writes zeros past the old end.
            buf.resize(len, 0);
            return Ok((buf, true));
        }
        drop(free);
        self.allocated.fetch_add(1, Ordering::Relaxed);
        Ok((zeroed(len, len.saturating_add(len / Self::ROOM))?, false))
    }

    /// Gives back a buffer a [`LoaderBatch`](super::LoaderBatch) field came in, once nothing
    /// reads it any more.
    pub fn give(&self, buf: Vec<u8>) {
        if buf.capacity() > Self::KEEP_BYTES {
            return;
        }
        let mut free = lock(&self.free);
        free.push(buf);
        let mut held: usize = free.iter().map(Vec::capacity).sum();
        while free.len() > self.keep || held > Self::KEEP_BYTES {
            held -= free.remove(0).capacity();
        }
    }

    /// Buffers [`BufferPool::take`] has made new so far, because none given back fitted:
    /// once a loader runs steadily and its consumer gives every buffer back, this stops
    /// growing.
    pub fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }

    /// Buffers waiting to be reused.
    pub fn len(&self) -> usize {
        lock(&self.free).len()
    }

    /// True when no buffer waits to be reused.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::BufferPool;

    #[test]
    fn pool_reuses_a_buffer_for_a_batch_of_another_length() {
        let pool = BufferPool::default();
        let (first, reused) = pool.take(1000).unwrap();
        assert!(!reused && first.len() == 1000 && first.iter().all(|&b| b == 0));
        let at = first.as_ptr();
        pool.give(first);
        // A ragged field's next batch, a little longer: the same memory, grown in place.
        let (mut next, reused) = pool.take(1100).unwrap();
        assert!(reused && next.len() == 1100 && next.as_ptr() == at);
        next.fill(7);
        pool.give(next);
        let (shorter, reused) = pool.take(900).unwrap();
        assert!(reused && shorter.len() == 900 && shorter.as_ptr() == at);
        pool.give(shorter);
        // Far smaller requests do not tie up a large buffer.
        let (small, reused) = pool.take(100).unwrap();
        assert!(!reused && small.len() == 100);
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn pool_takes_the_smallest_fit_and_drops_the_oldest_when_full() {
        let pool = BufferPool::default();
        let (big, _) = pool.take(4000).unwrap();
        let (small, _) = pool.take(2000).unwrap();
        let small_at = small.as_ptr();
        pool.give(big);
        pool.give(small);
        assert_eq!(pool.take(1900).unwrap().0.as_ptr(), small_at);
        pool.give(pool.take(10).unwrap().0);
        assert!(pool.take(10).unwrap().1, "a buffer that fits is reused");
        pool.give(Vec::with_capacity(10));
        for _ in 0..BufferPool::KEEP {
            pool.give(Vec::with_capacity(5000));
        }
        assert_eq!(pool.len(), BufferPool::KEEP);
        // The small buffer was given back before the others, so it went first.
        assert!(!pool.take(10).unwrap().1, "the oldest buffer was dropped");
    }
}
