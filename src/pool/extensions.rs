//! [`Extensions`]: what higher layers keep per connection (the file layer's SFTP channels,
//! the resident runner), each under a type of its own.
//!
//! The pool sits below the layers that own those types, so it cannot name them; it keeps one
//! value per type instead, and every layer asks for its own type by name (`get::<T>()`), with
//! no downcast in sight. A map of this shape is what `http::Extensions` is; that one needs
//! `&mut` access and `Clone` values, and this one is shared behind `&Session` by concurrent
//! commands, so it is these few lines instead of a dependency.

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

/// One value per type, made on first use, kept until the connection is let go.
#[derive(Default)]
pub(crate) struct Extensions {
    values: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl Extensions {
    /// The connection's `T`, made by `T::default()` on first use.
    pub(crate) fn get<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut values = self.lock();
        let value = values
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        match value.clone().downcast::<T>() {
            Ok(value) => value,
            // Unreachable (the key is `T`'s own id), but no panic: a fresh value in its place.
            Err(_) => {
                let fresh = Arc::new(T::default());
                *value = fresh.clone();
                fresh
            }
        }
    }

    /// The connection's `T` if it was made, without making it.
    pub(crate) fn peek<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.lock()
            .get(&TypeId::of::<T>())
            .and_then(|value| value.clone().downcast::<T>().ok())
    }

    /// Lets every value go (the connection went): whoever holds one keeps their copy.
    pub(crate) fn clear(&self) {
        let values = std::mem::take(&mut *self.lock());
        drop(values);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TypeId, Arc<dyn Any + Send + Sync>>> {
        // A poisoned lock only means a panic elsewhere while inserting.
        self.values.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("values", &self.lock().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Counter(std::sync::atomic::AtomicU32);

    #[test]
    fn one_value_per_type_until_cleared() {
        let extensions = Extensions::default();
        assert!(extensions.peek::<Counter>().is_none());
        extensions
            .get::<Counter>()
            .0
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let again = extensions.get::<Counter>();
        assert_eq!(again.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(*extensions.get::<String>(), "");
        extensions.clear();
        assert!(extensions.peek::<Counter>().is_none());
        // A holder keeps its copy.
        assert_eq!(again.0.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
