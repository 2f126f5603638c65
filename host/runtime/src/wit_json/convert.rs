//! JSON arguments to component values, checked by the schema's rules with errors that say
//! where (a JSON pointer) and what; and component values back to JSON.

use serde::ser::{Serialize, SerializeMap as _, Serializer};
use serde_json::{Map, Value};
use wasmtime::component::Val;

use crate::{CallError, Output};
use wasmtime::component::types::{Type, Variant};

use super::MAX_DEPTH;
use super::schema::{is_option, unsupported};

/// Bytes of the input that one error message quotes (a string's start, a number's text,
/// an unknown key). The message goes back to the model; without a cap an argument of a
/// megabyte would come back whole, once per failed attempt.
const MAX_QUOTED_BYTES: usize = 40;

/// Bytes of a list of names (cases, flags, keys) that one error message spells out.
const MAX_NAMES_BYTES: usize = 120;

/// Why JSON arguments do not fit a function's parameters. `at` is a JSON pointer into the
/// arguments object (empty for the object itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgError {
    /// A value of the wrong shape or out of range.
    #[error("{}: expected {expected}, got {got}", place(.at))]
    Mismatch {
        /// Where.
        at: String,
        /// What the type allows, in words.
        expected: String,
        /// What was there, in words, quoting at most [`MAX_QUOTED_BYTES`] of it.
        got: String,
    },
    /// A required parameter or field is absent.
    #[error("{}: expected {expected}, got nothing (it is required)", place(.at))]
    Missing {
        /// Where.
        at: String,
        /// What the type allows, in words.
        expected: String,
    },
    /// A key that is no parameter or field.
    #[error("{}: unknown key, expected one of {known}", place(.at))]
    Unknown {
        /// Where, the key cut to [`MAX_QUOTED_BYTES`].
        at: String,
        /// The keys allowed.
        known: String,
    },
    /// The parameter's type has no JSON form (the function should not have been offered).
    #[error("{}: {what} has no JSON form", place(.at))]
    Unsupported {
        /// Where.
        at: String,
        /// The type, in words.
        what: &'static str,
    },
    /// Nested deeper than [`MAX_DEPTH`] (the function should not have been offered).
    #[error("{}: nested deeper than {limit} levels", place(.at))]
    TooDeep {
        /// Where.
        at: String,
        /// The cap.
        limit: usize,
    },
}

fn place(at: &str) -> &str {
    if at.is_empty() { "the arguments" } else { at }
}

/// The values to call a function with `params` with, from its JSON arguments object.
pub(crate) fn args_to_vals(args: &Value, params: &[(String, Type)]) -> Result<Vec<Val>, ArgError> {
    let mut at = String::new();
    let Some(object) = args.as_object() else {
        return Err(mismatch(&at, "an object of arguments".into(), args));
    };
    let fields: Vec<(&str, &Type)> = params.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let vals = object_fields(object, &fields, &mut at, 1)?;
    Ok(vals.into_iter().map(|(_, v)| v).collect())
}

/// The values of `fields`, in order, from `object`: unknown keys refused, an absent
/// `option` none, any other absent field refused.
fn object_fields(
    object: &Map<String, Value>,
    fields: &[(&str, &Type)],
    at: &mut String,
    depth: usize,
) -> Result<Vec<(String, Val)>, ArgError> {
    if let Some(key) = object.keys().find(|k| !fields.iter().any(|(name, _)| name == k)) {
        let known = names(fields.iter().map(|(name, _)| (*name).to_owned()));
        return Err(ArgError::Unknown { at: pointer(at, &cut(key)), known });
    }
    let mut vals = Vec::with_capacity(fields.len());
    for (name, ty) in fields {
        let val = match object.get(*name) {
            Some(value) => nested(at, name, |at| to_val(value, ty, at, depth))?,
            None if is_option(ty) => Val::Option(None),
            None => {
                return Err(ArgError::Missing { at: pointer(at, name), expected: expected(ty) });
            }
        };
        vals.push(((*name).to_owned(), val));
    }
    Ok(vals)
}

/// `ty`'s value from `value`, found at `at` and `depth` levels down.
fn to_val(value: &Value, ty: &Type, at: &mut String, depth: usize) -> Result<Val, ArgError> {
    if depth > MAX_DEPTH {
        return Err(ArgError::TooDeep { at: at.clone(), limit: MAX_DEPTH });
    }
    let wrong = |at: &String| mismatch(at, expected(ty), value);
    Ok(match ty {
        Type::Bool => Val::Bool(value.as_bool().ok_or_else(|| wrong(at))?),
        Type::S8 => Val::S8(integer(value).ok_or_else(|| wrong(at))?),
        Type::U8 => Val::U8(integer(value).ok_or_else(|| wrong(at))?),
        Type::S16 => Val::S16(integer(value).ok_or_else(|| wrong(at))?),
        Type::U16 => Val::U16(integer(value).ok_or_else(|| wrong(at))?),
        Type::S32 => Val::S32(integer(value).ok_or_else(|| wrong(at))?),
        Type::U32 => Val::U32(integer(value).ok_or_else(|| wrong(at))?),
        Type::S64 => Val::S64(integer(value).ok_or_else(|| wrong(at))?),
        Type::U64 => Val::U64(integer(value).ok_or_else(|| wrong(at))?),
        Type::Float32 => {
            let x = value.as_f64().filter(|x| x.abs() <= f64::from(f32::MAX));
            Val::Float32(x.ok_or_else(|| wrong(at))? as f32)
        }
        Type::Float64 => Val::Float64(value.as_f64().ok_or_else(|| wrong(at))?),
        Type::Char => {
            let mut chars = value.as_str().unwrap_or_default().chars();
            match (chars.next(), chars.next(), value.is_string()) {
                (Some(c), None, true) => Val::Char(c),
                _ => return Err(wrong(at)),
            }
        }
        Type::String => Val::String(value.as_str().ok_or_else(|| wrong(at))?.to_owned()),
        Type::List(list) => {
            let items = value.as_array().ok_or_else(|| wrong(at))?;
            Val::List(array(items, |_| list.ty(), at, depth)?)
        }
        Type::Tuple(tuple) => {
            let items = value.as_array().filter(|a| a.len() == tuple.types().len());
            let types: Vec<Type> = tuple.types().collect();
            Val::Tuple(array(items.ok_or_else(|| wrong(at))?, |i| types[i].clone(), at, depth)?)
        }
        Type::Record(record) => {
            let object = value.as_object().ok_or_else(|| wrong(at))?;
            let fields: Vec<(&str, Type)> = record.fields().map(|f| (f.name, f.ty)).collect();
            let fields: Vec<(&str, &Type)> = fields.iter().map(|(n, t)| (*n, t)).collect();
            Val::Record(object_fields(object, &fields, at, depth + 1)?)
        }
        Type::Variant(variant) => {
            to_variant(value, variant, at, depth).ok_or_else(|| wrong(at))??
        }
        Type::Enum(cases) => match value.as_str() {
            Some(name) if cases.names().any(|c| c == name) => Val::Enum(name.to_owned()),
            _ => return Err(wrong(at)),
        },
        Type::Flags(flags) => {
            let items = value.as_array().ok_or_else(|| wrong(at))?;
            let mut set: Vec<String> = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(name)
                        if flags.names().any(|f| f == name) && !set.iter().any(|s| s == name) =>
                    {
                        set.push(name.to_owned());
                    }
                    _ => {
                        let expected = format!(
                            "a flag not given before, one of {}",
                            names(flags.names().map(quoted))
                        );
                        return Err(mismatch(&pointer(at, &i.to_string()), expected, item));
                    }
                }
            }
            Val::Flags(set)
        }
        Type::Option(option) => match value {
            Value::Null => Val::Option(None),
            some => Val::Option(Some(Box::new(to_val(some, &option.ty(), at, depth + 1)?))),
        },
        Type::Result(result) => {
            let (key, payload) = single_key(value).ok_or_else(|| wrong(at))?;
            let ty = match key {
                "ok" => result.ok(),
                "err" => result.err(),
                _ => return Err(wrong(at)),
            };
            let payload = nested(at, key, |at| payload_val(payload, ty.as_ref(), at, depth))?;
            Val::Result(if key == "ok" { Ok(payload) } else { Err(payload) })
        }
        Type::Own(_)
        | Type::Borrow(_)
        | Type::Future(_)
        | Type::Stream(_)
        | Type::ErrorContext
        | Type::Map(_)
        | Type::FixedLengthList(_) => {
            let what = unsupported(ty).unwrap_or("a type");
            return Err(ArgError::Unsupported { at: at.clone(), what });
        }
    })
}

/// A variant's value: `None` when `value` names no case in a form the case allows (a
/// payload-less case as a string, a case with a payload as `{"case": payload}`).
fn to_variant(
    value: &Value,
    variant: &Variant,
    at: &mut String,
    depth: usize,
) -> Option<Result<Val, ArgError>> {
    if let Some(name) = value.as_str() {
        let case = variant.cases().find(|c| c.name == name && c.ty.is_none())?;
        return Some(Ok(Val::Variant(case.name.to_owned(), None)));
    }
    let (key, payload) = single_key(value)?;
    let case = variant.cases().find(|c| c.name == key)?;
    let ty = case.ty?;
    let val = nested(at, key, |at| to_val(payload, &ty, at, depth + 1));
    Some(val.map(|v| Val::Variant(key.to_owned(), Some(Box::new(v)))))
}

/// A result arm's payload: `null` when the arm has no type.
fn payload_val(
    payload: &Value,
    ty: Option<&Type>,
    at: &mut String,
    depth: usize,
) -> Result<Option<Box<Val>>, ArgError> {
    match ty {
        Some(ty) => Ok(Some(Box::new(to_val(payload, ty, at, depth + 1)?))),
        None if payload.is_null() => Ok(None),
        None => Err(mismatch(at, "null".into(), payload)),
    }
}

fn array(
    items: &[Value],
    ty_of: impl Fn(usize) -> Type,
    at: &mut String,
    depth: usize,
) -> Result<Vec<Val>, ArgError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| nested(at, &i.to_string(), |at| to_val(item, &ty_of(i), at, depth + 1)))
        .collect()
}

/// The only key of an object that has exactly one, and its value.
fn single_key(value: &Value) -> Option<(&str, &Value)> {
    let object = value.as_object().filter(|o| o.len() == 1)?;
    object.iter().next().map(|(k, v)| (k.as_str(), v))
}

/// An integer of the type `T` from a JSON number: an integer serde_json parsed exactly,
/// or a float with no fraction (JSON Schema's `integer` counts `2.0` as one). `None` out
/// of `T`'s range.
fn integer<T: TryFrom<i128>>(value: &Value) -> Option<T> {
    let n = value.as_number()?;
    let wide = match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i128::from(i),
        (None, Some(u), _) => i128::from(u),
        // Outside i128 the cast saturates, which is outside every integer type too.
        (None, None, Some(f)) if f.is_finite() && f.fract() == 0.0 => f as i128,
        _ => return None,
    };
    T::try_from(wide).ok()
}

/// Runs `f` with `segment` pushed onto the pointer `at`.
fn nested<R>(at: &mut String, segment: &str, f: impl FnOnce(&mut String) -> R) -> R {
    let len = at.len();
    push_segment(at, segment);
    let r = f(at);
    at.truncate(len);
    r
}

fn pointer(at: &str, segment: &str) -> String {
    let mut at = at.to_owned();
    push_segment(&mut at, segment);
    at
}

/// Appends `/segment`, escaped as RFC 6901 says (`~` as `~0`, `/` as `~1`).
fn push_segment(at: &mut String, segment: &str) {
    at.push('/');
    at.push_str(&segment.replace('~', "~0").replace('/', "~1"));
}

/// `text` cut to [`MAX_QUOTED_BYTES`] on a character boundary, with `…` where cut.
fn cut(text: &str) -> String {
    if text.len() <= MAX_QUOTED_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_QUOTED_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn mismatch(at: &str, expected: String, value: &Value) -> ArgError {
    ArgError::Mismatch { at: at.to_owned(), expected, got: got(value) }
}

/// What `value` is, in words, quoting at most [`MAX_QUOTED_BYTES`] of it.
fn got(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => cut(&n.to_string()),
        Value::String(s) => format!("the string {}", quoted(&cut(s))),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(o) => format!("an object with {} keys", o.len()),
    }
}

fn quoted(name: &str) -> String {
    Value::String(name.to_owned()).to_string()
}

/// `names` joined with commas, cut after [`MAX_NAMES_BYTES`].
fn names(names: impl Iterator<Item = String>) -> String {
    let mut out = String::new();
    for name in names {
        if out.len() + name.len() > MAX_NAMES_BYTES {
            out.push_str(", …");
            break;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&name);
    }
    out
}

/// What a value of `ty` looks like, in words.
fn expected(ty: &Type) -> String {
    fn range(min: impl std::fmt::Display, max: impl std::fmt::Display) -> String {
        format!("an integer from {min} to {max}")
    }
    match ty {
        Type::Bool => "true or false".into(),
        Type::S8 => range(i8::MIN, i8::MAX),
        Type::U8 => range(u8::MIN, u8::MAX),
        Type::S16 => range(i16::MIN, i16::MAX),
        Type::U16 => range(u16::MIN, u16::MAX),
        Type::S32 => range(i32::MIN, i32::MAX),
        Type::U32 => range(u32::MIN, u32::MAX),
        Type::S64 => range(i64::MIN, i64::MAX),
        Type::U64 => range(u64::MIN, u64::MAX),
        Type::Float32 => format!("a number from {:e} to {:e}", f32::MIN, f32::MAX),
        Type::Float64 => "a number".into(),
        Type::Char => "a string of one character".into(),
        Type::String => "a string".into(),
        Type::List(_) => "an array".into(),
        Type::Tuple(tuple) => format!("an array of {} items", tuple.types().len()),
        Type::Record(_) => "an object".into(),
        Type::Variant(variant) => {
            let cases = variant.cases().map(|c| match c.ty {
                None => quoted(c.name),
                Some(_) => format!("{{{}: …}}", quoted(c.name)),
            });
            format!("one of {}", names(cases))
        }
        Type::Enum(cases) => format!("one of {}", names(cases.names().map(quoted))),
        Type::Flags(flags) => {
            format!("an array of distinct flags from {}", names(flags.names().map(quoted)))
        }
        Type::Option(option) => format!("{} or null", expected(&option.ty())),
        Type::Result(_) => r#"{"ok": …} or {"err": …}"#.into(),
        Type::Own(_)
        | Type::Borrow(_)
        | Type::Future(_)
        | Type::Stream(_)
        | Type::ErrorContext
        | Type::Map(_)
        | Type::FixedLengthList(_) => unsupported(ty).unwrap_or("a type").to_owned(),
    }
}

/// The JSON of a function's results: `null` for none, the one result's JSON for one (a
/// function has at most one), an array for several.
pub(crate) fn vals_to_json(results: &[Val]) -> Value {
    // Serializing into a `Value` fails only for a map key that is not a string, and
    // every key written here is one (a field, a case, `ok`, `err`).
    serde_json::to_value(Results(results)).unwrap_or(Value::Null)
}

/// A call's results as what goes back: the one result, or a single `result`'s `ok` arm,
/// as itself when it is a string ([`as_text`]) and as its JSON otherwise (`null` for an
/// arm without a payload); a `result`'s `err` arm as the call's failure, a string as
/// itself and anything else as its JSON; several results as [`vals_to_json`] gives them.
///
/// A string is moved, not copied or escaped: the text that reaches a client or the model
/// is the string, escaped once into the JSON that carries it (as a host without bx gives
/// it), not a JSON string escaped a second time. Anything else is written straight from
/// the values, each string in it escaped once, with no [`Value`] between.
pub(crate) fn render(mut results: Vec<Val>) -> Result<Output, CallError> {
    let one = match results.as_mut_slice() {
        [one] => std::mem::replace(one, Val::Bool(false)),
        _ => return Ok(Output::Json(text(&Results(&results)))),
    };
    match one {
        Val::Result(Ok(payload)) => Ok(shown(payload.map(|p| *p))),
        // An error is small; its JSON value says whether it is a string (an enum case,
        // a char and a payload-less variant are strings too, an option of one as well).
        Val::Result(Err(payload)) => Err(CallError::Failed(
            match serde_json::to_value(Payload(payload.as_deref())).unwrap_or(Value::Null) {
                Value::String(message) => message,
                other => other.to_string(),
            },
        )),
        one => Ok(shown(Some(one))),
    }
}

/// One value as what goes back: [`as_text`]'s text, or its JSON (`null` for none).
fn shown(value: Option<Val>) -> Output {
    match value.map(as_text) {
        Some(Ok(text)) => Output::Text(text),
        Some(Err(other)) => Output::Json(text(&AsJson(&other))),
        None => Output::Json("null".to_owned()),
    }
}

/// A value that is a string, as that string: a `string` (moved), a `char`, an `enum`
/// case or a `variant`'s payload-less case. Anything else is handed back, an `option`
/// of a string included: its `none` is `null`, which a string `"null"` would then read
/// as.
fn as_text(value: Val) -> Result<String, Val> {
    match value {
        Val::String(s) => Ok(s),
        Val::Char(c) => Ok(c.to_string()),
        Val::Enum(case) | Val::Variant(case, None) => Ok(case),
        other => Err(other),
    }
}

/// A `result` value split into its arm's JSON (`null` for an arm without a payload), so
/// that the caller can make an `err` the call's failure. `None` for any other value.
pub(crate) fn split_result(value: &Val) -> Option<Result<Value, Value>> {
    let json =
        |payload: Option<&Val>| serde_json::to_value(Payload(payload)).unwrap_or(Value::Null);
    match value {
        Val::Result(Ok(payload)) => Some(Ok(json(payload.as_deref()))),
        Val::Result(Err(payload)) => Some(Err(json(payload.as_deref()))),
        _ => None,
    }
}

/// `value`'s JSON text. Writing into a `String` fails only for a map key that is not a
/// string (none here: see [`vals_to_json`]).
fn text(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// A function's results, as [`vals_to_json`] says.
struct Results<'a>(&'a [Val]);

impl Serialize for Results<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            [] => s.serialize_unit(),
            [one] => AsJson(one).serialize(s),
            many => s.collect_seq(many.iter().map(AsJson)),
        }
    }
}

/// A `result` arm's payload: its JSON, or `null` for none.
struct Payload<'a>(Option<&'a Val>);

impl Serialize for Payload<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(v) => AsJson(v).serialize(s),
            None => s.serialize_unit(),
        }
    }
}

/// One value's JSON by the table in [`super`]. A NaN or infinite float is `null` (JSON
/// has neither); a value of a type with no JSON form (never in a function offered as a
/// tool) is `null` too. A record's fields are written in the order of their names, as
/// the keys of a [`Value`] object are.
struct AsJson<'a>(&'a Val);

impl Serialize for AsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Val::Bool(b) => s.serialize_bool(*b),
            Val::S8(n) => s.serialize_i8(*n),
            Val::U8(n) => s.serialize_u8(*n),
            Val::S16(n) => s.serialize_i16(*n),
            Val::U16(n) => s.serialize_u16(*n),
            Val::S32(n) => s.serialize_i32(*n),
            Val::U32(n) => s.serialize_u32(*n),
            Val::S64(n) => s.serialize_i64(*n),
            Val::U64(n) => s.serialize_u64(*n),
            // Through the shortest decimal that reads back as the same f32: `0.1`, not
            // `0.10000000149011612`, and `0.1` read back as an f32 is the value given.
            Val::Float32(x) => match x.to_string().parse::<f64>() {
                Ok(x) if x.is_finite() => s.serialize_f64(x),
                _ => s.serialize_unit(),
            },
            Val::Float64(x) if x.is_finite() => s.serialize_f64(*x),
            Val::Char(c) => s.serialize_char(*c),
            Val::String(text) => s.serialize_str(text),
            Val::List(items) | Val::Tuple(items) => s.collect_seq(items.iter().map(AsJson)),
            Val::Record(fields) => {
                let mut fields: Vec<&(String, Val)> = fields.iter().collect();
                fields.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                s.collect_map(fields.into_iter().map(|(name, v)| (name, AsJson(v))))
            }
            Val::Variant(case, None) | Val::Enum(case) => s.serialize_str(case),
            Val::Variant(case, Some(payload)) => single(s, case, AsJson(payload)),
            Val::Option(None) => s.serialize_unit(),
            Val::Option(Some(v)) => AsJson(v).serialize(s),
            Val::Result(Ok(payload)) => single(s, "ok", Payload(payload.as_deref())),
            Val::Result(Err(payload)) => single(s, "err", Payload(payload.as_deref())),
            Val::Flags(names) => s.collect_seq(names),
            Val::Float64(_)
            | Val::Map(_)
            | Val::FixedLengthList(_)
            | Val::Resource(_)
            | Val::Future(_)
            | Val::Stream(_)
            | Val::ErrorContext(_) => s.serialize_unit(),
        }
    }
}

/// An object of one key.
fn single<S: Serializer>(s: S, key: &str, value: impl Serialize) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(1))?;
    map.serialize_entry(key, &value)?;
    map.end()
}
