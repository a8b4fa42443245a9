//! One unit of a view: a run of rows gathered from the token store and written as
//! Arrow files and, with extra formats, their token parts, in the view's build
//! directory. Units are written in parallel; their boundaries depend only on the
//! plan, so the files are the same whatever the thread count.

use crate::cache::formats::{FormatsPlan, RowSink, UnitParts};
use crate::cache::layout::BuildLayout;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::{Columns, PartWriter, Row};

use super::ViewError;
use super::gather::Gather;
use super::rows::Plan;
use super::store::StoreShard;

/// What every unit of a view's split shares.
pub struct UnitContext<'a> {
    pub build: &'a BuildLayout,
    pub split: &'a str,
    pub columns: Columns,
    pub formats: FormatsPlan<'a>,
    pub target_shard_bytes: u64,
    pub pad_id: u32,
    /// Whether the units write Arrow files (not when another view's are linked).
    pub arrow: bool,
}

/// What one unit wrote.
pub struct UnitOutput {
    /// Arrow files in order, names relative to the split's parts directory.
    pub arrow: Vec<WrittenFile>,
    pub formats: Option<UnitParts>,
    pub rows: u64,
}

/// Writes the rows `rows` (indices into `plan.rows`, in output order) as unit `unit`.
pub fn write_unit(
    context: &UnitContext,
    unit: (usize, usize),
    plan: &Plan,
    rows: impl Iterator<Item = usize>,
    shards: &[StoreShard],
    in_order: bool,
) -> Result<UnitOutput, ViewError> {
    let UnitContext { build, split, .. } = *context;
    let arrow = context.arrow.then(|| {
        PartWriter::new(context.columns, context.target_shard_bytes, move |part| build.view_part(split, unit, part))
    });
    let mut sink = RowSink::new(arrow, context.formats, |kind| build.view_format_part(split, unit, kind))?;
    let mut gather = Gather::new(shards, in_order);
    let (mut tokens, mut starts) = (Vec::new(), Vec::new());
    let mut count = 0;
    for index in rows {
        let row = &plan.rows[index];
        gather.row(plan, row, context.pad_id, &mut tokens, &mut starts)?;
        sink.push_row(Row { tokens: &tokens, starts: &starts, padding: row.padding as usize })?;
        count += 1;
    }
    let files = sink.finish()?;
    Ok(UnitOutput { arrow: files.arrow, formats: files.formats, rows: count })
}
