package engine

// ScramVerifierWithSalt is scramVerifier for the tests: a given salt and
// iteration count, so the result can be compared with fixed vectors and
// with the verifier PostgreSQL itself computes.
var ScramVerifierWithSalt = scramVerifier
