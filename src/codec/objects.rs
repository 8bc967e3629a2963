//! Structs read from JSON objects only (serde also takes arrays).

/// Deserializes a struct from a JSON object only.
///
/// serde's derived structs also accept a JSON array, filling the fields by
/// position (`["search:kb"]` as a payload); the published schemas do not, so
/// neither does this reader. Use as `#[serde(deserialize_with = "object")]`
/// on struct-valued fields; [`super::decode`] applies it to the message itself.
pub fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
}

/// [`object`] for each item of an array field.
pub fn objects<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    struct Item<T>(T);
    impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Item<T> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            object(d).map(Item)
        }
    }
    let items = <Vec<Item<T>> as serde::Deserialize>::deserialize(deserializer)?;
    Ok(items.into_iter().map(|i| i.0).collect())
}

/// [`object`] for an optional field: `null` or absent is `None`.
pub fn optional_object<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    deserializer.deserialize_option(OptionalObjectVisitor(std::marker::PhantomData))
}

struct ObjectVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
    }
}

struct OptionalObjectVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for OptionalObjectVisitor<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object or null")
    }

    fn visit_none<E>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        object(d).map(Some)
    }
}
