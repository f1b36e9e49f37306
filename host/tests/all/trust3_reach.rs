//! The third trust round's reach: what a knowdb's SQL, the catalog guard
//! and a MariaDB provider may touch, and reloads of a knowdb by a relative
//! path.
