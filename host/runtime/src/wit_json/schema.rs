//! The JSON Schema (draft 2020-12) of a function's arguments object and of its result,
//! written by the rules in the module's table, with the work bounded as it goes.

use serde_json::{Map, Value, json};
use wasmtime::component::types::Type;

use super::{MAX_DEPTH, MAX_SCHEMA_BYTES, TypeError};

/// Serialized bytes that every schema node writes at the least (`{"const":""}` is 12).
/// Charged per node while writing, with the bytes of every name, so that the running
/// total never exceeds the real size: a schema refused early is one that would not fit.
const NODE_BYTES: usize = 12;

/// The schema of the arguments object of a function with `params`: an object with a
/// property per parameter, the parameters that are not `option` required, and no others.
pub(crate) fn args_schema(params: &[(String, Type)]) -> Result<Value, TypeError> {
    let mut writer = Writer { of: "the arguments", at: String::new(), bytes: NODE_BYTES };
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, ty) in params {
        writer.at = format!("parameter `{name}`");
        writer.charge_name(name)?;
        properties.insert(name.clone(), writer.schema(ty, 1)?);
        if !is_option(ty) {
            writer.charge_name(name)?;
            required.push(Value::String(name.clone()));
        }
    }
    let schema = object_schema(properties, required);
    writer.check_size(&schema)?;
    Ok(schema)
}

/// The schema of a function's result: `{"type":"null"}` when it has none.
pub(crate) fn result_schema(results: &[Type]) -> Result<Value, TypeError> {
    let mut writer = Writer { of: "the result", at: "the result".into(), bytes: 0 };
    let schema = match results {
        [] => json!({"type": "null"}),
        [one] => writer.schema(one, 1)?,
        // A function has at most one result since the component model dropped named
        // results; wasmtime still lists results as a sequence, so write several as a tuple.
        many => {
            let items = many.iter().map(|ty| writer.schema(ty, 1)).collect::<Result<_, _>>()?;
            tuple_schema(items, many.len())
        }
    };
    writer.check_size(&schema)?;
    Ok(schema)
}

/// Whether a parameter or field of type `ty` may be left out of its object (= none).
pub(crate) fn is_option(ty: &Type) -> bool {
    matches!(ty, Type::Option(_))
}

/// The types with no JSON form, in words; `None` for every other type.
pub(crate) fn unsupported(ty: &Type) -> Option<&'static str> {
    match ty {
        Type::Own(_) => Some("a resource handle (own)"),
        Type::Borrow(_) => Some("a borrowed resource handle"),
        Type::Future(_) => Some("a future"),
        Type::Stream(_) => Some("a stream"),
        Type::ErrorContext => Some("an error-context"),
        // Neither is enabled in bx's engine, so no component bx runs has one.
        Type::Map(_) => Some("a map"),
        Type::FixedLengthList(_) => Some("a fixed-length list"),
        _ => None,
    }
}

struct Writer {
    /// `the arguments` or `the result`, for [`TypeError::TooLarge`].
    of: &'static str,
    /// The parameter being written, for [`TypeError::TooDeep`] and `Unsupported`.
    at: String,
    /// A lower bound of the serialized size written so far.
    bytes: usize,
}

impl Writer {
    fn charge(&mut self, bytes: usize) -> Result<(), TypeError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > MAX_SCHEMA_BYTES {
            return Err(TypeError::TooLarge { of: self.of, limit: MAX_SCHEMA_BYTES });
        }
        Ok(())
    }

    /// A name written once: its bytes and its two quotes.
    fn charge_name(&mut self, name: &str) -> Result<(), TypeError> {
        self.charge(name.len() + 2)
    }

    /// The exact check, once the schema is written: counted, not kept.
    fn check_size(&self, schema: &Value) -> Result<(), TypeError> {
        let mut counter = ByteCounter(0);
        // Writing a `Value` into a counter cannot fail; a failure is still refused.
        let fits = serde_json::to_writer(&mut counter, schema).is_ok();
        if !fits || counter.0 > MAX_SCHEMA_BYTES {
            return Err(TypeError::TooLarge { of: self.of, limit: MAX_SCHEMA_BYTES });
        }
        Ok(())
    }

    fn schema(&mut self, ty: &Type, depth: usize) -> Result<Value, TypeError> {
        if depth > MAX_DEPTH {
            return Err(TypeError::TooDeep { at: self.at.clone(), limit: MAX_DEPTH });
        }
        self.charge(NODE_BYTES)?;
        Ok(match ty {
            Type::Bool => json!({"type": "boolean"}),
            Type::S8 => integer(i8::MIN, i8::MAX),
            Type::U8 => integer(u8::MIN, u8::MAX),
            Type::S16 => integer(i16::MIN, i16::MAX),
            Type::U16 => integer(u16::MIN, u16::MAX),
            Type::S32 => integer(i32::MIN, i32::MAX),
            Type::U32 => integer(u32::MIN, u32::MAX),
            Type::S64 => integer(i64::MIN, i64::MAX),
            Type::U64 => integer(u64::MIN, u64::MAX),
            Type::Float32 => {
                let max = f64::from(f32::MAX);
                json!({"type": "number", "minimum": -max, "maximum": max})
            }
            Type::Float64 => json!({"type": "number"}),
            Type::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
            Type::String => json!({"type": "string"}),
            Type::List(list) => {
                json!({"type": "array", "items": self.schema(&list.ty(), depth + 1)?})
            }
            Type::Tuple(tuple) => {
                let items =
                    tuple.types().map(|t| self.schema(&t, depth + 1)).collect::<Result<_, _>>()?;
                tuple_schema(items, tuple.types().len())
            }
            Type::Record(record) => {
                let mut properties = Map::new();
                let mut required = Vec::new();
                for field in record.fields() {
                    self.charge_name(field.name)?;
                    properties.insert(field.name.to_owned(), self.schema(&field.ty, depth + 1)?);
                    if !is_option(&field.ty) {
                        self.charge_name(field.name)?;
                        required.push(Value::String(field.name.to_owned()));
                    }
                }
                object_schema(properties, required)
            }
            Type::Variant(variant) => {
                let mut cases = Vec::new();
                for case in variant.cases() {
                    self.charge_name(case.name)?;
                    cases.push(match &case.ty {
                        None => json!({"const": case.name}),
                        Some(payload) => {
                            self.charge(NODE_BYTES)?;
                            single_key(case.name, self.schema(payload, depth + 1)?)
                        }
                    });
                }
                json!({"oneOf": cases})
            }
            Type::Enum(cases) => json!({"type": "string", "enum": self.names(cases.names())?}),
            Type::Flags(flags) => json!({
                "type": "array",
                "items": {"type": "string", "enum": self.names(flags.names())?},
                "uniqueItems": true,
            }),
            Type::Option(option) => {
                json!({"anyOf": [self.schema(&option.ty(), depth + 1)?, {"type": "null"}]})
            }
            Type::Result(result) => {
                let mut arm = |key: &str, ty: Option<Type>| -> Result<Value, TypeError> {
                    self.charge(NODE_BYTES)?;
                    let payload = match ty {
                        Some(ty) => self.schema(&ty, depth + 1)?,
                        None => json!({"type": "null"}),
                    };
                    Ok(single_key(key, payload))
                };
                json!({"oneOf": [arm("ok", result.ok())?, arm("err", result.err())?]})
            }
            Type::Own(_)
            | Type::Borrow(_)
            | Type::Future(_)
            | Type::Stream(_)
            | Type::ErrorContext
            | Type::Map(_)
            | Type::FixedLengthList(_) => {
                let what = unsupported(ty).unwrap_or("a type");
                return Err(TypeError::Unsupported { at: self.at.clone(), what });
            }
        })
    }

    fn names<'a>(&mut self, names: impl Iterator<Item = &'a str>) -> Result<Vec<Value>, TypeError> {
        names
            .map(|name| {
                self.charge_name(name)?;
                Ok(Value::String(name.to_owned()))
            })
            .collect()
    }
}

fn integer(min: impl Into<Value>, max: impl Into<Value>) -> Value {
    json!({"type": "integer", "minimum": min.into(), "maximum": max.into()})
}

fn tuple_schema(items: Vec<Value>, len: usize) -> Value {
    json!({"type": "array", "prefixItems": items, "minItems": len, "maxItems": len})
}

fn object_schema(properties: Map<String, Value>, required: Vec<Value>) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// An object with exactly the one key `key`, whose value is `payload`: a variant case or
/// a result arm.
fn single_key(key: &str, payload: Value) -> Value {
    let mut properties = Map::new();
    properties.insert(key.to_owned(), payload);
    object_schema(properties, vec![Value::String(key.to_owned())])
}

struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
