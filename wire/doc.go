// Package wire owns the broker's JSON wire format on the gateway: the
// strict grammar every request body and every billed answer must pass, the
// byte-level tests that grammar is made of, and the walkers that read
// values out of text the grammar accepted. It does not import Caddy; the
// packages that decide (limits, meter, tenancy) call it.
//
// # The rules
//
// A text is accepted only when the broker reads it the same way, and
// refused (a 400 for a request body, no bill for an answer) otherwise:
//
//   - RFC 8259 JSON, exactly one value, surrounding whitespace allowed;
//   - valid UTF-8 (encoding/json would replace bad bytes; the broker 0.15.1
//     crashes on them), and no leading byte-order mark (the broker's library
//     skips one; refusing is simpler than agreeing on every reader);
//   - no \u escape that leaves half of a surrogate pair;
//   - nesting within DefaultMaxDepth;
//   - where a value is stored (CheckStored), no U+0000: PostgreSQL holds it
//     in neither text nor jsonb. The column rules of the broker's schema
//     (name lengths in characters, uuid text) are in limits/schema.go,
//     over StringChars and the walkers here.
//
// A member named twice is read as the broker reads it: the last one wins.
//
// Answers pass the same grammar before anything bills from them (an answer
// it refuses bills nothing). Member names in a request body and in push,
// transaction, cycle and replay answers are matched exactly, once
// unescaped (UnescapedIs). Pop billing is the one exception today: the
// fields a message's redelivery key is built from (id, partitionId,
// transactionId, consumerGroup) are matched in any letter case, because
// the reading it falls back to is encoding/json's, which folds case; the
// fast pop readers in meter fold likewise so that both give one count.
//
// # The files
//
//   - scan.go: the grammar, written once: a reader that resumes anywhere
//     (inside an escape or a UTF-8 sequence too), run over a whole buffer
//     by SkipValid and SkipValidString, and piece by piece by the Checker.
//   - check.go: Checker, the grammar over pieces of any size (a streamed
//     body or answer), which says what is wrong and at which byte; Check and
//     CheckStored for a whole body, without allocating. FuzzCoreAgreesWithOld
//     holds the core to the two readers it replaced (oracle_test.go).
//   - bytes.go: the byte-level tests the grammar is made of, each written
//     once: SpecialBytes (eight bytes at a time: does any need a look),
//     PlainRun, PlainByte, HexDigit, Hex4, HexWord, RuneStart (the bounds
//     of a UTF-8 sequence) and Surrogate. Readers elsewhere call these
//     rather than keep a copy.
//   - number.go: NumberStep, RFC 8259's number grammar a byte at a time,
//     for the core (past the plain integers and decimals it reads at once)
//     and for meter's answer reader alike.
//   - strings.go: the string helpers: Unquote (a string's text, as the
//     broker decodes it), UnescapedIs (compare without allocating), NULAt
//     (U+0000 raw or escaped) and StringChars (characters of a JSON
//     string, as PostgreSQL counts them).
//   - text.go: TextError, the part of the rules any body must meet before
//     anything reads it (UTF-8, no byte-order mark).
//   - iter.go, walk.go: Object, Array, Members, Elements, ValueEnd and
//     PlainBytes, which read checked text in place without allocating.
//
// # Where each body and answer is read
//
// Request bodies (each checked here first, read by the package that
// decides on it):
//
//   - push and transaction: limits/producebody.go (the reference reading,
//     one item at a time), limits/producefast.go and limits/producesdk.go
//     (the one-pass readers that only accept; anything they are unsure of
//     goes to the reference reading); a transaction's cursor writes:
//     limits/txnpositions.go;
//   - configure and DLQ replay: limits/configure.go; the lengths of stored
//     names in configure and ack bodies: limits/schema.go;
//   - KV batches: tenancy/batch.go; the probe's reserved names in any body:
//     tenancy/reservedname.go;
//   - which check a body gets, and the order of refusals:
//     caddymodule/bodycheck.go and caddymodule/admit.go.
//
// Answers (billed or relayed):
//
//   - the streaming answer grammar the tallies run on: meter/answerscan.go,
//     with the broker's fixed element shapes in meter/answershape.go and
//     meter/pushshape.go;
//   - push: meter/pushtally.go; transaction: meter/txntally.go;
//   - pop: meter/billscan.go (kept answers), meter/popcount.go and
//     meter/popkeys.go (answers too large to keep), falling back to
//     encoding/json in meter/bill.go where the fast reading declines;
//   - streams cycle and DLQ replay: meter/answerreduce.go and meter/bill.go;
//   - error answers that expose the cell's internals:
//     internal/cellerror/cellerror.go, applied by caddymodule/errorscrub.go.
package wire
