// Package model holds xlane's domain types (networks, endpoints, modes) and
// the errors every layer uses to say what went wrong: FieldError names the
// bad field, ErrNotFound and ErrConflict are sentinels callers test with
// errors.Is. The store persists these types; the API serves them as JSON.
package model
