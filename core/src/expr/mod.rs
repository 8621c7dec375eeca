//! The Capillaries expression language (spec §5): parser, type check and evaluator.
