//! A view's rows as pieces of documents: a piece is a run of one shard's tokens;
//! a row is one or more pieces, then padding. Planned from the documents' lengths
//! alone (`plan`, `best_fit`); no token is read until a row is written (`gather`).

/// A run of `len` tokens of shard `shard`, from token `start` of its `.bin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub shard: u32,
    pub start: u64,
    pub len: u32,
}

/// One row: `pieces` pieces of the plan from `first`, then `padding` pad tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRef {
    pub first: usize,
    pub pieces: u32,
    pub padding: u32,
}

/// What packing kept, dropped and added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Tokens of documents in rows.
    pub tokens: u64,
    pub padding: u64,
    /// Tokens at the end of each shard too few for a row (concat).
    pub remainder: u64,
    /// Tokens cut off long documents (truncate).
    pub truncated: u64,
    /// Documents longer than a row, cut into pieces (best_fit).
    pub documents_split: u64,
}

impl PlanStats {
    pub fn add(&mut self, other: &PlanStats) {
        self.tokens += other.tokens;
        self.padding += other.padding;
        self.remainder += other.remainder;
        self.truncated += other.truncated;
        self.documents_split += other.documents_split;
    }
}

/// A run of rows and the pieces they are made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub pieces: Vec<Piece>,
    pub rows: Vec<RowRef>,
    pub stats: PlanStats,
}

impl Plan {
    pub fn pieces_of(&self, row: &RowRef) -> &[Piece] {
        &self.pieces[row.first..row.first + row.pieces as usize]
    }

    /// Tokens a row holds, padding included.
    pub fn row_tokens(&self, row: &RowRef) -> u64 {
        self.pieces_of(row).iter().map(|piece| u64::from(piece.len)).sum::<u64>() + u64::from(row.padding)
    }

    /// Adds a row of `pieces` and `padding` pad tokens.
    pub fn push_row(&mut self, pieces: impl IntoIterator<Item = Piece>, padding: u32) {
        let first = self.pieces.len();
        for piece in pieces {
            self.stats.tokens += u64::from(piece.len);
            self.pieces.push(piece);
        }
        let pieces = (self.pieces.len() - first) as u32;
        self.stats.padding += u64::from(padding);
        self.rows.push(RowRef { first, pieces, padding });
    }

    /// Appends `other`'s rows after this plan's.
    pub fn append(&mut self, other: Plan) {
        let base = self.pieces.len();
        self.pieces.extend(other.pieces);
        self.rows.extend(other.rows.into_iter().map(|row| RowRef { first: row.first + base, ..row }));
        self.stats.add(&other.stats);
    }

    /// The rows cut into consecutive runs of at most `max_tokens` tokens each (a
    /// longer row alone), the units a view writes in parallel: each run's row range.
    pub fn runs(&self, max_tokens: u64) -> Vec<std::ops::Range<usize>> {
        self.runs_of(self.rows.iter(), max_tokens)
    }

    /// `runs` of the rows taken in `order` (indices into `rows`): ranges of `order`.
    pub fn runs_in(&self, order: &[usize], max_tokens: u64) -> Vec<std::ops::Range<usize>> {
        self.runs_of(order.iter().map(|&index| &self.rows[index]), max_tokens)
    }

    fn runs_of<'a>(&'a self, rows: impl Iterator<Item = &'a RowRef>, max_tokens: u64) -> Vec<std::ops::Range<usize>> {
        let mut runs = Vec::new();
        let (mut start, mut tokens, mut count) = (0, 0, 0);
        for (at, row) in rows.enumerate() {
            count = at + 1;
            let row_tokens = self.row_tokens(row);
            if at > start && tokens + row_tokens > max_tokens {
                runs.push(start..at);
                (start, tokens) = (at, 0);
            }
            tokens += row_tokens;
        }
        if start < count || runs.is_empty() {
            runs.push(start..count);
        }
        runs
    }
}

/// Where each document of `lengths` starts, in tokens from the shard's first, and
/// where the last ends: `lengths.len() + 1` offsets.
pub fn document_offsets(lengths: &[u32]) -> Vec<u64> {
    let mut offsets = Vec::with_capacity(lengths.len() + 1);
    let mut offset = 0u64;
    offsets.push(0);
    for &length in lengths {
        offset += u64::from(length);
        offsets.push(offset);
    }
    offsets
}
