//! One shard as a pipeline that keeps every core busy with few shards: the shard's
//! reader parses and batches documents, the worker pool encodes several batches
//! at once, and one writer thread writes their documents to the token store's
//! shard files in input order. `--jobs`
//! counts the pool's threads; where they leave a CPU free, the reader has a thread
//! of its own, else it runs on the pool thread that runs the shard.
//! Batch boundaries depend only on the input and rows are emitted in batch
//! order, so the output is the same whatever the thread count and scheduling.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError, channel, sync_channel};
use std::time::Instant;

use rayon::prelude::*;

use crate::cache::layout::token_store_file;
use crate::cache::manifest::EncoderKind;
use crate::cache::manifest::{Counts, InputRecord, WrittenFile};
use crate::cache::token_store::DocumentWriter;
use crate::source::{self, Document, DocumentReader, Item};
use crate::spec::BadRecordPolicy;

use super::budget::{Slot, wait_running_queued_work};
use super::shard::{ShardContext, ShardError, ShardRecord, ShardTask};

/// Documents tokenized together (in parallel) before packing.
const BATCH_DOCUMENTS: usize = 256;
const BATCH_TEXT_BYTES: usize = 1 << 20;
/// With the fast encoder, the first document of a shard, and then the first one
/// after every this many bytes of text, are also encoded by the reference encoder
/// and must give the same ids (see `GuardSchedule`).
const GUARD_STRIDE_BYTES: u64 = 4 << 20;
/// How much of a sampled document both encoders compare: its start, up to this
/// many bytes. The reference encoder runs at a few MB/s on sparse samples (its
/// cache stays cold), so checking whole documents cost a seventh of a build's time;
/// prefixes of many documents keep the guard's reach at a fiftieth of that cost.
const SAMPLE_BYTES: usize = 2048;

/// Tokenizes the shard and saves its record.
pub(super) fn tokenize(context: &ShardContext, task: &ShardTask, kind: EncoderKind) -> Result<ShardRecord, ShardError> {
    let started = Instant::now();
    let path = &task.input.path;
    let reader = source::open(path, context.spec.source.format, &context.selector)?;
    let (read, written) = run(context, task, kind, reader)?;
    // A token store's rows are its documents.
    let counts = Counts {
        input_bytes: task.input.size,
        documents: read.documents,
        filtered_documents: read.filtered,
        skipped_records: read.skipped,
        rows: read.documents,
        tokens: written.files[0].tokens,
        ..written.documents
    };
    let record = ShardRecord {
        split: task.split.clone(),
        shard: task.shard,
        input: InputRecord::new(&task.input, &task.hash),
        encoder: kind,
        counts,
        files: written.files.to_vec(),
        seconds: started.elapsed().as_secs_f64(),
        host: crate::fsutil::whoami().host.clone(),
        pid: crate::fsutil::whoami().pid,
    };
    let record_path = context.build.shard_record(&task.split, task.shard);
    crate::fsutil::write_json_atomic(&record_path, &record)
        .map_err(|source| ShardError::Record { path: record_path, source })?;
    Ok(record)
}

/// The start of `text` the guard compares: up to `SAMPLE_BYTES`, cut at a character.
fn sample_of(text: &str) -> &str {
    let mut end = text.len().min(SAMPLE_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Which documents of a shard the guard compares: the first, then the first one
/// to start at least `GUARD_STRIDE_BYTES` of text after the last sampled one's
/// start. The reference encoder runs at a few MB/s against the fast core's hundreds,
/// and costs more than its own time: perf counted 4.5% of a one-thread build in it,
/// yet the build ran 14-16% faster without it (its large tables likely push the
/// fast encoder's out of the CPU caches). Taking every 128th document made that cost
/// follow the documents' size: a fifth of a one-thread build on documents of 3.5 KB.
/// Spaced by text, it checks about 1/2000 of the text whatever the documents, a
/// thousand samples in 4 GB.
#[derive(Debug, Default)]
struct GuardSchedule {
    text_bytes: u64,
    next_sample_at: u64,
}

impl GuardSchedule {
    /// Whether the next document, `len` bytes of text, is sampled.
    fn samples(&mut self, len: usize) -> bool {
        let due = self.text_bytes >= self.next_sample_at;
        if due {
            self.next_sample_at = self.text_bytes + GUARD_STRIDE_BYTES;
        }
        self.text_bytes += len as u64;
        due
    }
}

/// A batch's documents as ids (BOS/EOS included), with each one's source.
struct EncodedBatch {
    ids: Vec<Vec<u32>>,
    sources: Vec<Option<String>>,
}

/// Encodes documents in parallel (order kept), checking the sampled ones (their
/// places in the batch, in order) against the reference encoder when the fast
/// one is used.
fn encode_batch(
    context: &ShardContext,
    path: &std::path::Path,
    batch: Vec<Document>,
    sampled: &[usize],
    kind: EncoderKind,
) -> Result<EncodedBatch, ShardError> {
    let ids = batch
        .par_iter()
        .enumerate()
        .map(|(offset, document)| {
            let encode_error =
                |source| ShardError::Encode { path: path.to_path_buf(), record: document.record, source };
            let ids = context.encoders.encode(&document.text, kind).map_err(encode_error)?;
            if kind.is_fast() && sampled.binary_search(&offset).is_ok() {
                let sample = sample_of(&document.text);
                // A whole document's ids are already at hand.
                let fast = if sample.len() < document.text.len() {
                    Some(context.encoders.encode(sample, kind).map_err(encode_error)?)
                } else {
                    None
                };
                let reference = context.encoders.encode_reference(sample).map_err(encode_error)?;
                if reference != *fast.as_ref().unwrap_or(&ids) {
                    return Err(ShardError::FastPathMismatch { path: path.to_path_buf(), record: document.record });
                }
            }
            Ok(context.encoders.with_bos_eos(ids))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The texts are done with here; only the sources go on to the writer.
    Ok(EncodedBatch { ids, sources: batch.into_iter().map(|document| document.source).collect() })
}

/// A batch's encoded documents (or why there are none), in input order.
struct Encoded<'a> {
    sequence: u64,
    result: Result<EncodedBatch, ShardError>,
    _slot: Option<Slot<'a>>,
}

/// What reading the shard counted.
#[derive(Debug, Default)]
pub(super) struct ReadTotals {
    pub documents: u64,
    pub filtered: u64,
    pub skipped: BTreeMap<String, u64>,
}

/// What writing the shard produced.
pub(super) struct Written {
    /// Document lengths and tokens per source (the other counts are zero).
    pub documents: Counts,
    /// The shard's `.bin` and `.idx`, named as the token store holds them.
    pub files: [WrittenFile; 2],
}

/// Reads, encodes and writes one shard; the first error in input order wins.
pub(super) fn run(
    context: &ShardContext,
    task: &ShardTask,
    kind: EncoderKind,
    reader: Box<dyn DocumentReader>,
) -> Result<(ReadTotals, Written), ShardError> {
    let build = context.build;
    let [bin, idx] = ["bin", "idx"].map(|extension| build.document_part(&task.split, task.shard, extension));
    let writer = DocumentWriter::create(&bin, &idx, context.dtype)?;
    let cancelled = AtomicBool::new(false);
    let (sender, receiver) = channel();
    let (writer_running, writer_done) = channel::<()>();
    std::thread::scope(|threads| {
        let cancelled = &cancelled;
        let writing = threads.spawn(move || {
            // Dropped when writing ends, however it ends: that tells the pool thread.
            let _running = writer_running;
            write_in_order(context, task, receiver, writer, cancelled)
        });
        let dispatch = Dispatch { context, path: &task.input.path, kind, sender, cancelled };
        let mut reading = Reading::new(context, task, reader, cancelled);
        let totals = if context.reading_threads {
            let (batches, read) = sync_channel(READ_AHEAD_BATCHES);
            let reading = threads.spawn(move || reading.send_all(batches));
            rayon::in_place_scope(|pool| dispatch.run(pool, || receive_running_queued_work(&read)));
            reading.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        } else {
            rayon::in_place_scope(|pool| dispatch.run(pool, || reading.next_batch()));
            reading.totals
        };
        // The writer's input ends once every encoding task has sent its batch. It
        // then makes the shard's files durable (an fsync: a few ms on a local disk
        // once writeback started as they were written, longer on some network
        // filesystems); meanwhile this pool thread encodes other shards' batches
        // rather than idle. Nothing is sent: the channel ends with the writer.
        while receive_running_queued_work(&writer_done).is_some() {}
        let written = writing.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok((totals, written?))
    })
}

/// Batches read but not yet handed to the pool, per shard, with a reading thread:
/// the reader stays one batch ahead of the encoders and holds no more text than that.
const READ_AHEAD_BATCHES: usize = 1;

/// A batch read, in input order.
enum ReadBatch {
    /// The documents of one batch and the places in it the guard samples.
    Documents { documents: Vec<Document>, sampled: Vec<usize> },
    /// Reading stopped here; nothing follows.
    Failed(ShardError),
}

/// The reading end: reads, parses and batches documents, on a thread of its own
/// (see `ShardContext::reading_threads`) or on the pool thread that dispatches them.
struct Reading<'a> {
    context: &'a ShardContext<'a>,
    task: &'a ShardTask,
    reader: Box<dyn DocumentReader>,
    cancelled: &'a AtomicBool,
    guard: GuardSchedule,
    totals: ReadTotals,
    /// Input bytes already added to the progress counters.
    reported: u64,
    /// The reader has given its last item.
    at_end: bool,
    /// The last batch (or failure) has been given.
    done: bool,
}

impl<'a> Reading<'a> {
    fn new(
        context: &'a ShardContext<'a>,
        task: &'a ShardTask,
        reader: Box<dyn DocumentReader>,
        cancelled: &'a AtomicBool,
    ) -> Self {
        let (guard, totals) = (GuardSchedule::default(), ReadTotals::default());
        Reading { context, task, reader, cancelled, guard, totals, reported: 0, at_end: false, done: false }
    }

    /// Reads every batch into `batches`, then gives what reading counted.
    fn send_all(mut self, batches: SyncSender<ReadBatch>) -> ReadTotals {
        while let Some(batch) = self.next_batch() {
            // The pool's end receives until reading ends: only its panic gets here.
            if batches.send(batch).is_err() {
                break;
            }
        }
        self.totals
    }

    /// The next batch; `None` at the end, after a failure too.
    fn next_batch(&mut self) -> Option<ReadBatch> {
        if self.done {
            return None;
        }
        let batch = match self.read_batch() {
            Ok(Some(batch)) => return Some(batch),
            Ok(None) => None,
            Err(err) => Some(ReadBatch::Failed(err)),
        };
        self.done = true;
        // Count the bytes not yet reported (compressed tails, filtered records).
        let unreported = self.task.input.size.saturating_sub(self.reported);
        self.context.counters.input_bytes.fetch_add(unreported, Ordering::Relaxed);
        batch
    }

    /// Reads up to a batch of documents; `None` when there are no more (or the shard
    /// was cancelled).
    fn read_batch(&mut self) -> Result<Option<ReadBatch>, ShardError> {
        let path = &self.task.input.path;
        let mut batch: Vec<Document> = Vec::with_capacity(BATCH_DOCUMENTS);
        let mut sampled = Vec::new();
        let mut batch_bytes = 0;
        while !self.at_end && batch.len() < BATCH_DOCUMENTS && batch_bytes < BATCH_TEXT_BYTES {
            if self.cancelled.load(Ordering::Relaxed) {
                return Ok(None);
            }
            match self.reader.next_item()? {
                Some(Item::Document(document)) => {
                    if self.guard.samples(document.text.len()) {
                        sampled.push(batch.len());
                    }
                    batch_bytes += document.text.len();
                    batch.push(document);
                }
                Some(Item::Filtered) => self.totals.filtered += 1,
                Some(Item::Bad { record, problem }) => match self.context.spec.source.on_bad_record {
                    BadRecordPolicy::Fail => return Err(ShardError::BadRecord { path: path.clone(), record, problem }),
                    BadRecordPolicy::Skip => *self.totals.skipped.entry(problem.reason().to_string()).or_default() += 1,
                },
                None => self.at_end = true,
            }
        }
        if batch.is_empty() {
            return Ok(None);
        }
        self.totals.documents += batch.len() as u64;
        let read = self.reader.input_bytes_read();
        self.context.counters.input_bytes.fetch_add(read.saturating_sub(self.reported), Ordering::Relaxed);
        self.reported = self.reported.max(read);
        Ok(Some(ReadBatch::Documents { documents: batch, sampled }))
    }
}

/// The pool's end of reading: hands each batch read to the pool as the build's
/// budget has room, numbered in input order.
struct Dispatch<'a> {
    context: &'a ShardContext<'a>,
    path: &'a Path,
    kind: EncoderKind,
    sender: Sender<Encoded<'a>>,
    cancelled: &'a AtomicBool,
}

impl<'a> Dispatch<'a> {
    /// Runs on a pool thread until `next_batch` has no more.
    fn run<'scope>(self, pool: &rayon::Scope<'scope>, mut next_batch: impl FnMut() -> Option<ReadBatch>)
    where
        'a: 'scope,
    {
        let mut sequence = 0;
        while let Some(batch) = next_batch() {
            match batch {
                ReadBatch::Documents { documents, sampled } => self.spawn(pool, sequence, documents, sampled),
                ReadBatch::Failed(err) => {
                    let _ = self.sender.send(Encoded { sequence, result: Err(err), _slot: None });
                }
            }
            sequence += 1;
        }
    }

    /// Queues one batch for encoding once the build's budget has room for it.
    fn spawn<'scope>(&self, pool: &rayon::Scope<'scope>, sequence: u64, documents: Vec<Document>, sampled: Vec<usize>)
    where
        'a: 'scope,
    {
        let slot = self.context.budget.acquire();
        let (context, path, kind, cancelled) = (self.context, self.path, self.kind, self.cancelled);
        let sender = self.sender.clone();
        pool.spawn(move |_| {
            // After a failure the writer only drains: skip the work.
            if cancelled.load(Ordering::Relaxed) {
                return;
            }
            let result = encode_batch(context, path, documents, &sampled, kind);
            let _ = sender.send(Encoded { sequence, result, _slot: Some(slot) });
        });
    }
}

/// The next value from another thread (a reading thread's batch), `None` once
/// its senders are gone; the pool thread waiting for it runs queued encoding
/// work meanwhile.
fn receive_running_queued_work<T>(receiver: &Receiver<T>) -> Option<T> {
    wait_running_queued_work(|wait| match wait {
        None => match receiver.try_recv() {
            Ok(value) => Some(Some(value)),
            Err(TryRecvError::Disconnected) => Some(None),
            Err(TryRecvError::Empty) => None,
        },
        Some(timeout) => match receiver.recv_timeout(timeout) {
            Ok(value) => Some(Some(value)),
            Err(RecvTimeoutError::Disconnected) => Some(None),
            Err(RecvTimeoutError::Timeout) => None,
        },
    })
}

/// The writing end, the one place documents are written: takes encoded batches in
/// input order and appends their documents to the shard's files.
fn write_in_order(
    context: &ShardContext,
    task: &ShardTask,
    receiver: Receiver<Encoded>,
    mut writer: DocumentWriter,
    cancelled: &AtomicBool,
) -> Result<Written, ShardError> {
    let mut waiting: BTreeMap<u64, Encoded> = BTreeMap::new();
    let mut documents_seen = Counts::default();
    let mut next = 0;
    let mut failure = None;
    // Ends when the reader and every encoding task are done sending.
    for encoded in receiver {
        if failure.is_some() {
            continue;
        }
        waiting.insert(encoded.sequence, encoded);
        while let Some(encoded) = waiting.remove(&next) {
            next += 1;
            let emitted = encoded.result.and_then(|EncodedBatch { ids: documents, sources }| {
                for (ids, source) in documents.iter().zip(&sources) {
                    writer.push(ids)?;
                    documents_seen.add_document(ids.len() as u64, source.as_deref());
                }
                let tokens: u64 = documents.iter().map(|ids| ids.len() as u64).sum();
                context.counters.documents.fetch_add(documents.len() as u64, Ordering::Relaxed);
                context.counters.tokens.fetch_add(tokens, Ordering::Relaxed);
                Ok(())
            });
            if let Err(err) = emitted {
                cancelled.store(true, Ordering::Relaxed);
                failure = Some(err);
                waiting.clear();
                break;
            }
        }
    }
    if let Some(err) = failure {
        return Err(err);
    }
    let [bin, idx] = ["bin", "idx"].map(|extension| token_store_file(&task.split, task.shard, extension));
    let files = writer.finish(bin, idx)?;
    Ok(Written { documents: documents_seen, files })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_samples_the_first_document_then_one_per_stride_of_text() {
        let stride = GUARD_STRIDE_BYTES as usize;
        let mut guard = GuardSchedule::default();
        let sampled: Vec<bool> =
            [10, stride - 20, 5, 5, stride, 1, 0, 1].into_iter().map(|len| guard.samples(len)).collect();
        // Starts at 0, 10, stride-10, stride-5 (not yet), stride (due), 2*stride (due), then 2*stride+1 twice.
        assert_eq!(sampled, [true, false, false, false, true, true, false, false]);
        let mut small = GuardSchedule::default();
        let taken = (0..100_000).filter(|_| small.samples(200)).count();
        // Samples start at multiples of 200 bytes, the first at or past a stride after the last.
        let spacing = stride.div_ceil(200) * 200;
        assert_eq!(taken, (100_000 * 200_usize).div_ceil(spacing), "one sample per stride however short the documents");
    }

    #[test]
    fn the_guard_samples_the_start_of_a_document_cut_at_a_character() {
        assert_eq!(sample_of("short"), "short");
        let long = "é".repeat(SAMPLE_BYTES);
        let sample = sample_of(&long);
        assert_eq!(sample.len(), SAMPLE_BYTES, "{SAMPLE_BYTES} is even, a boundary of two-byte characters");
        let shifted = format!("a{long}");
        assert_eq!(sample_of(&shifted).len(), SAMPLE_BYTES - 1);
        assert!(shifted.starts_with(sample_of(&shifted)));
    }
}
