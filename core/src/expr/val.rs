//! Values while an expression is evaluated: borrowed or owned [`Val`]s, the evaluation mode
//! [`Ctx`] and the reusable text buffers; shared by the evaluator, the functions and the
//! aggregates, and below all three.

use std::cell::Cell;
use std::ops::Deref;
use std::sync::Arc;

use super::ops::AggFunc;
use super::prepare::Rounding;
use crate::value::Value;

/// A value borrowed from a row or a constant, or computed.
#[derive(Debug)]
pub(crate) enum Val<'a> {
    Ref(&'a Value),
    Own(Value),
}

impl Deref for Val<'_> {
    type Target = Value;
    #[inline]
    fn deref(&self) -> &Value {
        match self {
            Self::Ref(v) => v,
            Self::Own(v) => v,
        }
    }
}

impl Val<'_> {
    #[inline]
    pub(crate) fn into_owned(self) -> Value {
        match self {
            Self::Ref(v) => v.clone(),
            Self::Own(v) => v,
        }
    }
}

/// Evaluation mode: rounding, and the root aggregate when evaluating in aggregate mode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx {
    pub(crate) rounding: Rounding,
    pub(crate) agg: Option<AggFunc>,
}

thread_local! {
    /// A reusable text buffer for string results (one allocation per string result: the Arc).
    static BUF: Cell<String> = const { Cell::new(String::new()) };
}

/// Takes the thread's scratch buffer (empty); give it back with [`put_buf`].
pub(crate) fn take_buf() -> String {
    BUF.with(Cell::take)
}

/// Returns a scratch buffer, keeping the larger one (capped so one huge row does not pin memory).
pub(crate) fn put_buf(mut s: String) {
    s.clear();
    if s.capacity() > 1 << 16 {
        return;
    }
    BUF.with(|b| {
        let old = b.take();
        b.set(if old.capacity() >= s.capacity() {
            old
        } else {
            s
        });
    });
}

/// Builds a string value in the scratch buffer.
pub(crate) fn build_str(f: impl FnOnce(&mut String)) -> Value {
    let mut s = take_buf();
    f(&mut s);
    let v = Value::Str(Arc::from(s.as_str()));
    put_buf(s);
    v
}

/// `value(type)` for error messages.
pub(crate) fn describe(v: &Value) -> Box<str> {
    format!("{}({})", crate::gofmt::format_value(v), v.go_type_name()).into()
}

/// Maximum arguments evaluated on the stack; longer calls (only `fmt.Sprintf` and unknown
/// functions can have them) use a vector.
pub(crate) const MAX_STACK_ARGS: usize = 8;
