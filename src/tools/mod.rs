//! Tools: the inventory the model is offered and the runtime-provided tools, one file
//! per tool.

pub mod result;

pub use result::{fence, Status, ToolResult};
