//! The DAG of a plan as SVG, laid out in process: no Graphviz on a peer.
//!
//! A layered layout in the Sugiyama style, kept small: a node's layer is the longest path from
//! a root (plans list nodes in topological order, so one pass suffices); nodes within a layer
//! start in plan order and are then reordered by the mean position of their parents (two
//! sweeps down), which removes most crossings of Capillaries-sized scripts. Each node is a
//! `<g data-node=… data-status=…>` so the console can link it and tests can read it; a layout
//! crate's SVG (layout-rs) would not carry those attributes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use plexus_core::plan::{Plan, Reader, StartPolicy, Writer};
use plexus_raft::NodeBatchStatus;

const BOX_W: f64 = 240.0;
const BOX_H: f64 = 62.0;
const GAP_X: f64 = 36.0;
const GAP_Y: f64 = 70.0;
const MARGIN: f64 = 20.0;

/// Fill and text colour of a status (the console's CSS uses the same values).
fn colours(s: NodeBatchStatus) -> (&'static str, &'static str) {
    match s {
        NodeBatchStatus::None => ("#eef0f4", "#1d2330"),
        NodeBatchStatus::Start => ("#ffd95e", "#1d2330"),
        NodeBatchStatus::Success => ("#3fb56b", "#ffffff"),
        NodeBatchStatus::Fail => ("#e5484d", "#ffffff"),
        NodeBatchStatus::StopReceived => ("#9aa1ad", "#ffffff"),
    }
}

/// One edge: from the creator of a table to the node reading it.
struct Edge {
    from: usize,
    to: usize,
    label: String,
    lookup: bool,
}

/// What a diagram shows besides the nodes and edges (Capillaries' `-detail idx,field`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detail {
    /// Label each edge with the table it reads or the index a lookup uses.
    pub idx: bool,
    /// List the fields each node writes (a line in the box, all of them in its tooltip).
    pub field: bool,
}

impl Detail {
    /// Capillaries' `-detail` list (`idx`, `field`, both, or empty for neither); an unknown
    /// word is returned as the error.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut d = Self {
            idx: false,
            field: false,
        };
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "idx" => d.idx = true,
                "field" => d.field = true,
                other => return Err(other.to_owned()),
            }
        }
        Ok(d)
    }
}

/// Renders the plan's DAG as the console shows it (edge labels, no field lists); with
/// `statuses`, every node is filled by its status in one run (nodes missing from the list are
/// `none`) and `run_status` is recorded on the root element.
pub fn svg(
    plan: &Plan,
    statuses: Option<&[(String, NodeBatchStatus)]>,
    run_status: Option<&str>,
) -> String {
    svg_with(
        plan,
        statuses,
        run_status,
        Detail {
            idx: true,
            field: false,
        },
    )
}

/// The names of the fields a node writes (table fields or file columns).
fn written_fields(node: &plexus_core::plan::PlanNode) -> Vec<&str> {
    match &node.writer {
        Writer::Table(w) => w.fields.iter().map(|f| f.name.as_str()).collect(),
        Writer::File(w) => w.columns.iter().map(|c| c.name.as_str()).collect(),
    }
}

/// [`svg`] with the details Capillaries' `validate_script -detail` chooses.
pub fn svg_with(
    plan: &Plan,
    statuses: Option<&[(String, NodeBatchStatus)]>,
    run_status: Option<&str>,
    detail: Detail,
) -> String {
    let box_h = if detail.field { BOX_H + 16.0 } else { BOX_H };
    let index: BTreeMap<&str, usize> = plan
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let creator = |table: &str| {
        plan.tables
            .get(table)
            .and_then(|t| index.get(t.created_by.as_str()).copied())
    };
    let mut edges = Vec::new();
    for (i, n) in plan.nodes.iter().enumerate() {
        if let Reader::Table(r) = &n.reader
            && let Some(from) = creator(&r.table)
        {
            edges.push(Edge {
                from,
                to: i,
                label: r.table.clone(),
                lookup: false,
            });
        }
        if let Some(l) = &n.lookup
            && let Some(from) = creator(&l.table)
        {
            edges.push(Edge {
                from,
                to: i,
                label: l.index_name.clone(),
                lookup: true,
            });
        }
    }
    let n = plan.nodes.len();
    // Longest-path layers: parents come earlier in plan order.
    let mut layer = vec![0usize; n];
    for e in &edges {
        if e.from < e.to {
            layer[e.to] = layer[e.to].max(layer[e.from] + 1);
        }
    }
    let depth = layer.iter().copied().max().map_or(0, |d| d + 1);
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (i, l) in layer.iter().enumerate() {
        rows[*l].push(i);
    }
    // Barycentre sweeps: order each layer by the mean slot of its parents.
    let mut slot = vec![0.0f64; n];
    for row in &rows {
        for (k, i) in row.iter().enumerate() {
            slot[*i] = k as f64;
        }
    }
    for _ in 0..2 {
        for row in rows.iter_mut().skip(1) {
            let mut keyed: Vec<(f64, usize)> = row
                .iter()
                .map(|&i| {
                    let parents: Vec<f64> = edges
                        .iter()
                        .filter(|e| e.to == i)
                        .map(|e| slot[e.from])
                        .collect();
                    let key = if parents.is_empty() {
                        slot[i]
                    } else {
                        parents.iter().sum::<f64>() / parents.len() as f64
                    };
                    (key, i)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            *row = keyed.into_iter().map(|(_, i)| i).collect();
            for (k, i) in row.iter().enumerate() {
                slot[*i] = k as f64;
            }
        }
    }
    let widest = rows.iter().map(Vec::len).max().unwrap_or(1).max(1) as f64;
    let width = MARGIN * 2.0 + widest * BOX_W + (widest - 1.0) * GAP_X;
    let height = MARGIN * 2.0 + depth.max(1) as f64 * (box_h + GAP_Y) - GAP_Y;
    let mut pos = vec![(0.0f64, 0.0f64); n];
    for (l, row) in rows.iter().enumerate() {
        let row_w = row.len() as f64 * BOX_W + (row.len().saturating_sub(1)) as f64 * GAP_X;
        let x0 = (width - row_w) / 2.0;
        for (k, &i) in row.iter().enumerate() {
            pos[i] = (
                x0 + k as f64 * (BOX_W + GAP_X),
                MARGIN + l as f64 * (box_h + GAP_Y),
            );
        }
    }

    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0} {height:.0}" width="{width:.0}" height="{height:.0}" font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif" data-run-status="{}">"##,
        xml(run_status.unwrap_or(""))
    );
    out.push_str(r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#7a8294"/></marker></defs>"##);
    for e in &edges {
        let (fx, fy) = pos[e.from];
        let (tx, ty) = pos[e.to];
        let (x1, y1) = (fx + BOX_W / 2.0, fy + box_h);
        let (x2, y2) = (tx + BOX_W / 2.0, ty);
        let my = (y1 + y2) / 2.0;
        let dash = if e.lookup {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        // The label sits three quarters of the way down the curve: edges leaving one node
        // fan out, so their labels overlap less near their targets.
        let t = 0.75f64;
        let u = 1.0 - t;
        let lx = u * u * u * x1 + 3.0 * u * u * t * x1 + 3.0 * u * t * t * x2 + t * t * t * x2;
        let ly = u * u * u * y1 + 3.0 * u * u * t * my + 3.0 * u * t * t * my + t * t * t * y2;
        let label = if detail.idx {
            format!(
                r##"<text x="{lx:.1}" y="{ly:.1}" font-size="10" fill="#6b7385" text-anchor="middle" paint-order="stroke" stroke="#ffffff" stroke-width="3">{}</text>"##,
                xml(&short(&e.label, 34))
            )
        } else {
            String::new()
        };
        let _ = write!(
            out,
            r##"<g class="edge"><path d="M{x1:.1},{y1:.1} C{x1:.1},{my:.1} {x2:.1},{my:.1} {x2:.1},{y2:.1}" fill="none" stroke="#7a8294" stroke-width="1.4"{dash} marker-end="url(#arrow)"/>{label}</g>"##
        );
    }
    for (i, node) in plan.nodes.iter().enumerate() {
        let (x, y) = pos[i];
        let status = statuses.map(|st| {
            st.iter()
                .find(|(name, _)| name == &node.name)
                .map_or(NodeBatchStatus::None, |(_, s)| *s)
        });
        let (fill, ink) = colours(status.unwrap_or(NodeBatchStatus::None));
        let manual = node.start_policy == StartPolicy::Manual;
        let target = match &node.writer {
            Writer::Table(w) => format!("→ table {}", w.name),
            Writer::File(w) => format!("→ file {}", short_path(&w.url_template, 30)),
        };
        let status_attr = status.map_or(String::new(), |s| format!(r#" data-status="{s}""#));
        let (fields_line, fields_title) = if detail.field {
            let fields = written_fields(node).join(", ");
            (
                format!(
                    r##"<text class="fields" x="{:.1}" y="{:.1}" font-size="9.5" fill="{ink}" text-anchor="middle" opacity="0.75">{}</text>"##,
                    x + BOX_W / 2.0,
                    y + 68.0,
                    xml(&short(&fields, 44))
                ),
                format!("&#10;fields: {}", xml(&fields)),
            )
        } else {
            (String::new(), String::new())
        };
        let border = if manual {
            r##" stroke="#1d2330" stroke-width="2.2" stroke-dasharray="2 2""##
        } else {
            r##" stroke="#c3c8d2" stroke-width="1""##
        };
        let _ = write!(
            out,
            r##"<g class="node" data-node="{name}"{status_attr}><title>{name}: {ty}{manual_t}{status_t}&#10;{desc}{fields_title}</title><rect x="{x:.1}" y="{y:.1}" width="{BOX_W}" height="{box_h}" rx="8" fill="{fill}"{border}/><text x="{cx:.1}" y="{t1:.1}" font-size="13" font-weight="600" fill="{ink}" text-anchor="middle">{short_name}</text><text x="{cx:.1}" y="{t2:.1}" font-size="10.5" fill="{ink}" text-anchor="middle" opacity="0.85">{ty}{manual_t}{status_t}</text><text x="{cx:.1}" y="{t3:.1}" font-size="10.5" fill="{ink}" text-anchor="middle" opacity="0.85">{target}</text>{fields_line}</g>"##,
            name = xml(&node.name),
            short_name = xml(&short(&node.name, 27)),
            ty = node.node_type.name(),
            manual_t = if manual { " · manual" } else { "" },
            status_t = status.map_or(String::new(), |s| format!(" · {s}")),
            desc = xml(&node.desc),
            cx = x + BOX_W / 2.0,
            t1 = y + 21.0,
            t2 = y + 37.0,
            t3 = y + 52.0,
            target = xml(&short(&target, 36)),
        );
    }
    out.push_str("</svg>\n");
    out
}

/// A path cut from the left, so the file name stays visible.
fn short_path(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_owned();
    }
    let tail: String = s.chars().skip(n - max.saturating_sub(1)).collect();
    format!("…{tail}")
}

/// `s` cut to `max` characters with an ellipsis.
fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// Escapes text for XML content and attributes.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
