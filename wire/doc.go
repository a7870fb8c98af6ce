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
// # The rules of answers
//
// Every answer the gateway bills from is read by one semantics, the
// broker's own, and fails closed. The broker writes its answers with
// exactly spelled member names and reads JSON by them exactly (a name in
// another letter case is another member to it, as to its SDKs, which read
// the parsed answer's properties by name); its parser keeps the last of a
// repeated member. So every answer reader here and in meter:
//
//   - reads nothing from a text the grammar refuses: it bills nothing (a
//     push, transaction, pop or cycle), or is unreadable (a replay);
//   - matches member names exactly, once unescaped (WordIs, UnescapedIs,
//     MemberValues); a name in another letter case is not the member;
//   - takes the last of a repeated member, whatever it holds (a later
//     null or number replaces an earlier string);
//   - where it cannot read a value exactly as the broker meant it, bills
//     as if it were absent only when that cannot lower the bill: a pop
//     message whose redelivery key is built from a field that is not a
//     plain string or null gets no key, so it is billed as a first
//     delivery rather than risk being taken for a redelivery.
//
// Pop billing once read case-insensitively (encoding/json's matching, the
// fallback of its fast path, which copied that folding); no reference
// billing depends on it, since the broker never writes another spelling,
// and a second semantics meant a second set of readers to keep in step.
//
// # The files
//
//   - scan.go: the grammar, written once: a reader that resumes anywhere
//     (inside an escape or a UTF-8 sequence too), run over a whole buffer
//     by SkipValid and SkipValidString, and piece by piece by the Checker
//     and by Stream; a watcher hears of what it passes, all of it (the
//     Checker's) or only down to a depth and of the names a filter lets
//     through (a Stream's, so a message's payload costs nothing more).
//   - check.go: Checker, the grammar over pieces of any size (a streamed
//     body or answer), which says what is wrong and at which byte; Check and
//     CheckStored for a whole body, without allocating. FuzzCoreAgreesWithOld
//     holds the core to the two readers it replaced (oracle_test.go).
//   - bytes.go: the byte-level tests the grammar is made of, each written
//     once: SpecialBytes (eight bytes at a time: does any need a look),
//     PlainRun, PlainByte, HexDigit, Hex4, CanonicalUUID, RuneStart (the bounds
//     of a UTF-8 sequence) and Surrogate. Readers elsewhere call these
//     rather than keep a copy.
//   - number.go: NumberStep, RFC 8259's number grammar a byte at a time,
//     for the core (past the plain integers and decimals it reads at once).
//   - stream.go: Stream, the core over the pieces of a streamed answer,
//     with a watcher that tells a StreamWatcher only what an answer reader
//     looks at (and hands the broker's fixed elements to shape.go); every
//     answer tally and BillPop read through it. WordIs, a member name
//     compared as the readers compare it.
//   - shape.go: the broker's fixed element shapes (Shape, Head,
//     MatchShape, MatchShapeGuessing, ElementsEnd), which read an element
//     of a known shape whole, byte for byte (a nested value by the core),
//     and leave any other to Stream.
//   - strings.go: the string helpers: Unquote and StringValue (a
//     string's text, as the broker decodes it), UnescapedIs (compare
//     without allocating), NULAt (U+0000 raw or escaped), StringChars
//     (characters of a JSON string, as PostgreSQL counts them) and
//     ShortPlainEnd (a short string that needs no decoding, in one look).
//   - text.go: TextError, the part of the rules any body must meet before
//     anything reads it (UTF-8, no byte-order mark).
//   - iter.go, walk.go: Array, Members, Elements, MemberValues and
//     ValueEnd, which read checked text in place without allocating;
//     TopMembers, the members of an answer's top-level object by the rules
//     of answers.
//
// # Where each body and answer is read
//
// Request bodies (each checked here first, read by the package that
// decides on it):
//
//   - push and transaction: limits/producefast.go (one pass with this
//     package's cursor, cursor.go, that checks, counts and refuses),
//     limits/producebody.go (what an item is, and the settling of an
//     operation whose type comes after its items); a transaction's cursor
//     writes: limits/txnpositions.go;
//   - configure and DLQ replay: limits/configure.go, which checks the body
//     and reads its top level once, names' lengths included; the lengths
//     of stored names in ack bodies, and the schema's other column rules:
//     limits/schema.go;
//   - KV and timers batches: limits/producebody.go (ReadOperations, which
//     sizes the operations and hands each one's members to its caller in
//     the same walk), for tenancy/batch.go's carve-out and push-block
//     verdicts; streams cycles: limits/producebody.go (ReadCycle: the sink
//     items, the state values and the push-block verdict in one walk);
//     ephemeral pushes and traces: limits/producebody.go; the probe's
//     reserved names in any body: tenancy/reservedname.go;
//   - which check a body gets, and the order of refusals:
//     caddymodule/bodycheck.go and caddymodule/admit.go.
//
// Answers (billed or relayed):
//
//   - the streaming answer reader the tallies run on: stream.go (the
//     core of scan.go with its watcher), with the broker's fixed element
//     shapes in shape.go;
//   - push: meter/pushtally.go; transaction: meter/txntally.go (both
//     watchers over Stream, with the broker's shapes); streams cycle and
//     DLQ replay: meter/cycletally.go (watchers over Stream, as they
//     stream, at any size);
//   - pop: meter/billscan.go, over Stream, for kept answers and, through
//     meter/popkeys.go, for answers too large to keep or cut short;
//   - ephemeral push: meter/bill.go, over TopMembers;
//   - error answers that expose the cell's internals:
//     internal/cellerror/cellerror.go, applied by caddymodule/errorscrub.go;
//   - answers the gateway reads outside billing, over TopMembers: the
//     queue listing (limits/inventory.go), the grants check
//     (tenancy/cellgrants.go) and the isolation probe
//     (tenancy/cellprobe.go).
package wire
