//! The third trust round's lookup bounds: batched and aggregate answers
//! bounded before they are held, and snapshot tables over their limit.
