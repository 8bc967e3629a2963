//! Checks of a decoded value: how deep it nests, and a JSON Schema.

use super::{DecodeError, MAX_DEPTH};

/// Refuses `values` (the value of `field`, or the members of the object
/// or array that is `field`'s value, one level down) when they nest
/// deeper than [`MAX_DEPTH`]. Walks without recursion, so no value can
/// exhaust the stack here.
pub fn check_depth<'a>(
    field: &str,
    values: impl IntoIterator<Item = &'a serde_json::Value>,
    level: usize,
) -> Result<(), DecodeError> {
    use serde_json::Value;
    let mut stack: Vec<(&Value, usize)> = values.into_iter().map(|v| (v, level)).collect();
    while let Some((value, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        let here = above + 1;
        if here > MAX_DEPTH {
            return Err(DecodeError::TooDeep {
                field: field.to_string(),
                limit: MAX_DEPTH,
            });
        }
        stack.extend(children.map(|v| (v, here)));
    }
    Ok(())
}

/// Checks `instance` against a compiled JSON Schema. The first error names
/// its field under `root` (`params.query`) and says whose schema it is.
pub fn check_schema(
    validator: &jsonschema::Validator,
    instance: &serde_json::Value,
    root: &str,
    whose: &str,
) -> Result<(), DecodeError> {
    let Some(error) = validator.iter_errors(instance).next() else {
        return Ok(());
    };
    let pointer = error.instance_path().to_string();
    let field = format!("{root}{}", pointer.replace('/', "."));
    Err(DecodeError::invalid(field, format!("{error} ({whose})")))
}
