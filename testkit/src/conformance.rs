//! The one finder of Capillaries' integration data for every test that reads it.
//!
//! Looked up, in order: `PLEXUS_CONFORMANCE_DIR` (our layout, `<dir>/<test>/{cfg,in,out}`, as
//! in `../shared/conformance`), `PLEXUS_CAPILLARIES_DIR` (a Capillaries checkout, laid out
//! `<dir>/test/data/{cfg,in,out}/<test>`), then `shared/conformance` beside the workspace
//! (`<workspace>/../shared/conformance`). When none is found a test is skipped: one line per
//! test process naming the variables goes straight to stderr (past libtest's capture), and
//! each skipped test is appended to `$PLEXUS_SKIP_LOG` when set, so `.ci/test` can count them.
//! With `CI=true` a missing data directory is an error instead of a skip.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// The variable naming a directory in our layout.
pub const CONFORMANCE_DIR_VAR: &str = "PLEXUS_CONFORMANCE_DIR";
/// The variable naming a Capillaries checkout.
pub const CAPILLARIES_DIR_VAR: &str = "PLEXUS_CAPILLARIES_DIR";
/// The file each skipped test is appended to (set by `.ci/test`).
pub const SKIP_LOG_VAR: &str = "PLEXUS_SKIP_LOG";

/// How a conformance data directory is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `<root>/<test>/{cfg,in,out}` (ours, `../shared/conformance`).
    Plexus,
    /// `<root>/test/data/{cfg,in,out}/<test>` (a Capillaries checkout).
    Capillaries,
}

/// One of the three data folders of an integration test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Scripts, params, Python and tag-criteria files.
    Cfg,
    /// Input files.
    In,
    /// Expected outputs (baselines).
    Out,
}

impl Part {
    fn dir_name(self) -> &'static str {
        match self {
            Self::Cfg => "cfg",
            Self::In => "in",
            Self::Out => "out",
        }
    }
}

/// Why the conformance data cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    /// A variable names a directory that is not a data directory of its layout.
    #[error("{var}={} is not a {layout:?}-layout conformance directory (no {})", dir.display(), probe.display())]
    BadDir {
        /// The variable.
        var: &'static str,
        /// Its value.
        dir: PathBuf,
        /// The layout the variable promises.
        layout: Layout,
        /// The folder that is missing.
        probe: PathBuf,
    },
    /// In CI (`CI=true`) the data must be present.
    #[error(
        "CI=true but no conformance data: set {CONFORMANCE_DIR_VAR} or {CAPILLARIES_DIR_VAR}, or put shared/conformance beside the workspace"
    )]
    MissingInCi,
}

/// A located conformance data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conformance {
    root: PathBuf,
    layout: Layout,
}

impl Conformance {
    /// A data directory at `root` in `layout` (not checked).
    pub fn at(root: impl Into<PathBuf>, layout: Layout) -> Self {
        Self {
            root: root.into(),
            layout,
        }
    }

    /// The directory given to the finder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Its layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// `part` of integration test `test` (e.g. `lookup`, `Part::Cfg`).
    pub fn dir(&self, test: &str, part: Part) -> PathBuf {
        match self.layout {
            Layout::Plexus => self.root.join(test).join(part.dir_name()),
            Layout::Capillaries => self.root.join("test/data").join(part.dir_name()).join(test),
        }
    }

    /// The cfg folder of `test`.
    pub fn cfg(&self, test: &str) -> PathBuf {
        self.dir(test, Part::Cfg)
    }

    /// The input folder of `test`.
    pub fn input(&self, test: &str) -> PathBuf {
        self.dir(test, Part::In)
    }

    /// The baseline folder of `test`.
    pub fn out(&self, test: &str) -> PathBuf {
        self.dir(test, Part::Out)
    }

    /// Builds a Capillaries-checkout-shaped copy of this data under `dest` (for tests that
    /// prove the `PLEXUS_CAPILLARIES_DIR` path); returns it.
    pub fn copy_as_capillaries(&self, dest: &Path, tests: &[&str]) -> std::io::Result<Self> {
        let to = Self::at(dest, Layout::Capillaries);
        for test in tests {
            for part in [Part::Cfg, Part::In, Part::Out] {
                copy_tree(&self.dir(test, part), &to.dir(test, part))?;
            }
        }
        Ok(to)
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), target)?;
        }
    }
    Ok(())
}

/// The environment the finder reads (injected so the rules can be tested).
#[derive(Clone, Debug, Default)]
pub struct FinderEnv {
    /// `PLEXUS_CONFORMANCE_DIR`.
    pub conformance_dir: Option<PathBuf>,
    /// `PLEXUS_CAPILLARIES_DIR`.
    pub capillaries_dir: Option<PathBuf>,
    /// The workspace root, whose sibling `shared/conformance` is the last resort.
    pub workspace: PathBuf,
    /// `CI` is `true`.
    pub ci: bool,
}

impl FinderEnv {
    /// The process environment; `workspace` is the workspace root.
    pub fn from_process(workspace: &Path) -> Self {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Self {
            conformance_dir: var(CONFORMANCE_DIR_VAR),
            capillaries_dir: var(CAPILLARIES_DIR_VAR),
            workspace: workspace.to_path_buf(),
            ci: std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1"),
        }
    }
}

/// Applies the lookup order to `env`: `Ok(None)` when no data is found outside CI.
pub fn locate(env: &FinderEnv) -> Result<Option<Conformance>, ConformanceError> {
    let checked = |var, dir: &Path, layout| {
        let c = Conformance::at(dir, layout);
        let probe = match layout {
            Layout::Plexus => dir.to_path_buf(),
            Layout::Capillaries => dir.join("test/data/cfg"),
        };
        if probe.is_dir() {
            Ok(c)
        } else {
            Err(ConformanceError::BadDir {
                var,
                dir: dir.to_path_buf(),
                layout,
                probe,
            })
        }
    };
    if let Some(dir) = &env.conformance_dir {
        return checked(CONFORMANCE_DIR_VAR, dir, Layout::Plexus).map(Some);
    }
    if let Some(dir) = &env.capillaries_dir {
        return checked(CAPILLARIES_DIR_VAR, dir, Layout::Capillaries).map(Some);
    }
    let beside = env.workspace.join("../shared/conformance");
    if beside.is_dir() {
        return Ok(Some(Conformance::at(beside, Layout::Plexus)));
    }
    if env.ci {
        return Err(ConformanceError::MissingInCi);
    }
    Ok(None)
}

/// The workspace root: the parent of the calling crate's manifest dir (`env!("CARGO_MANIFEST_DIR")`).
pub fn workspace_of(crate_dir: &str) -> PathBuf {
    let dir = Path::new(crate_dir);
    dir.parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| dir.to_path_buf())
}

static SKIP_NOTICE: Once = Once::new();

/// For a test that needs the data: the data, or `Ok(None)` after reporting the skip (pass
/// `env!("CARGO_MANIFEST_DIR")`). Use as `let Some(conf) = conformance(env!(…))? else { return Ok(()) };`.
pub fn conformance(crate_dir: &str) -> Result<Option<Conformance>, ConformanceError> {
    let found = locate(&FinderEnv::from_process(&workspace_of(crate_dir)))?;
    if found.is_none() {
        report_skip();
    }
    Ok(found)
}

/// Reports the calling test as skipped for want of conformance data.
fn report_skip() {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_string();
    SKIP_NOTICE.call_once(|| {
        // Straight to the stream: libtest captures only the print macros.
        let _ = writeln!(
            std::io::stderr(),
            "conformance data not found: skipping the tests that need it (set {CONFORMANCE_DIR_VAR} or {CAPILLARIES_DIR_VAR})"
        );
    });
    if let Some(mut f) = std::env::var_os(SKIP_LOG_VAR).and_then(|log| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .ok()
    }) {
        let _ = writeln!(f, "{test}");
    }
}

/// Writes a JSON params file into `dir`: the params file `from` (JSON or YAML) with some values
/// replaced, so a test can point a conformance script at its own copies of inputs and outputs.
pub fn params_with(dir: &Path, from: &Path, overrides: &[(&str, &str)]) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(from)?;
    let mut v: serde_json::Value = if from.extension().is_some_and(|e| e == "yaml") {
        yaml_serde::from_str(&text)?
    } else {
        serde_json::from_str(&text)?
    };
    if let Some(obj) = v.as_object_mut() {
        for (k, val) in overrides {
            obj.insert(
                (*k).to_string(),
                serde_json::Value::String((*val).to_string()),
            );
        }
    }
    let name = from
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "params".into());
    let out = dir.join(format!("{name}.json"));
    std::fs::write(&out, serde_json::to_string_pretty(&v)?)?;
    Ok(out)
}
