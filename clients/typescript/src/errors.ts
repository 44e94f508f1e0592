/*
 * errors.ts — the error classes of @tally/client, one per class of
 * docs/PROTOCOL.md's code table ("Error codes"), each carrying the code
 * (the same names as the Python client's exceptions):
 *
 *   B  BusinessRejection  decided against the store; stored, so the same
 *                         key answers the same again (replayed)
 *   V  InvalidCommand     decided from the command alone; not stored: fix
 *                         the command and send it again with the same key
 *   R  RefusedRequest     a refused request (malformed, unknown field, no
 *                         token, ...); not stored. Its subclass
 *                         IdempotencyKeyReused: the key was used for
 *                         another request (409), nothing changed
 *   F  Fault              a fault of the server or of the way to it, or no
 *                         answer at all (`unreachable`, `timed_out`); not
 *                         stored: retry with the same key (the client does,
 *                         within its deadline; then DeadlineExceeded)
 *
 * CODE_CLASSES is the table itself; a test compares it with
 * `tallyd --protocol-reference`, so it cannot drift.
 */

/** The class of a code in docs/PROTOCOL.md's code table. */
export type CodeClass = "B" | "V" | "R" | "F";

/** Every code tallyd sends, with its class (`tallyd --protocol-reference`, in its order). */
export const CODE_CLASSES: Readonly<Record<string, CodeClass>> = Object.freeze({
  "ok": "B",
  "storage_full": "F",
  "io_error": "F",
  "internal": "F",
  "out_of_memory": "F",
  "transaction_full": "F",
  "corrupt_record": "F",
  "store_locked": "F",
  "store_version_mismatch": "F",
  "not_found": "F",
  "invalid_argument": "F",
  "read_only": "F",
  "idempotency_key_reused": "R",
  "consumer_must_not_be_empty": "R",
  "consumer_too_long": "R",
  "key_must_not_be_empty": "R",
  "key_too_long": "R",
  "correlation_too_long": "R",
  "key_expired": "R",
  "consumer_reserved": "R",
  "exists": "B",
  "exists_with_different_ledger": "B",
  "exists_with_different_code": "B",
  "exists_with_different_flags": "B",
  "id_must_not_be_zero": "V",
  "ledger_must_not_be_zero": "V",
  "code_must_not_be_zero": "V",
  "reserved_flag": "V",
  "flags_are_mutually_exclusive": "V",
  "debit_account_id_must_not_be_zero": "V",
  "credit_account_id_must_not_be_zero": "V",
  "accounts_must_be_different": "V",
  "amount_must_not_be_zero": "V",
  "amount_must_not_be_negative": "V",
  "amount_overflows": "V",
  "timeout_reserved_for_pending_transfer": "V",
  "timeout_too_large": "V",
  "debit_account_not_found": "B",
  "credit_account_not_found": "B",
  "accounts_must_have_the_same_ledger": "B",
  "transfer_must_have_the_same_ledger_as_accounts": "B",
  "exists_with_different_debit_account_id": "B",
  "exists_with_different_credit_account_id": "B",
  "exists_with_different_amount": "B",
  "exists_with_different_timeout": "B",
  "overflows_debits_pending": "B",
  "overflows_credits_pending": "B",
  "overflows_debits_posted": "B",
  "overflows_credits_posted": "B",
  "overflows_debits": "B",
  "overflows_credits": "B",
  "exceeds_credits": "B",
  "exceeds_debits": "B",
  "id_already_failed": "B",
  "reversed_transfer_not_found": "B",
  "transfer_not_reversible": "B",
  "exceeds_unreversed_amount": "B",
  "exists_with_different_reverses": "B",
  "reverses_must_not_be_zero": "V",
  "pending_transfer_not_found": "B",
  "pending_transfer_not_pending": "B",
  "pending_transfer_already_posted": "B",
  "pending_transfer_already_voided": "B",
  "pending_transfer_expired": "B",
  "exceeds_pending_transfer_amount": "B",
  "closing_transfer_must_be_pending": "V",
  "debit_account_already_closed": "B",
  "credit_account_already_closed": "B",
  "timestamp_must_be_zero": "V",
  "imported_event_timestamp_out_of_range": "V",
  "imported_event_timeout_must_be_zero": "V",
  "imported_event_expected": "V",
  "imported_event_not_expected": "V",
  "imported_event_timestamp_must_not_advance": "B",
  "imported_event_timestamp_must_not_regress": "B",
  "imported_event_timestamp_must_postdate_debit_account": "B",
  "imported_event_timestamp_must_postdate_credit_account": "B",
  "subject_must_not_be_empty": "V",
  "subject_too_long": "V",
  "feature_must_not_be_empty": "V",
  "feature_too_long": "V",
  "time_out_of_range": "V",
  "duration_out_of_range": "V",
  "until_and_duration_are_mutually_exclusive": "V",
  "valid_until_must_be_in_future": "B",
  "entitlement_not_found": "B",
  "entitlement_already_active": "B",
  "entitlement_revoked": "B",
  "entitlement_already_revoked": "B",
  "entitlement_is_lifetime": "B",
  "extension_must_move_forward": "B",
  "stale": "B",
  "grant_transfer_not_found": "B",
  "linked_operation_failed": "B",
  "chain_must_not_be_empty": "V",
  "chain_too_long": "V",
  "chain_must_not_nest": "V",
  "unknown_command": "V",
  "field_not_allowed_for_command": "V",
  "malformed_request": "R",
  "request_too_large": "R",
  "unsupported_version": "R",
  "unknown_op": "R",
  "unknown_field": "R",
  "duplicate_field": "R",
  "missing_field": "R",
  "wrong_type": "R",
  "value_out_of_range": "R",
  "too_many_operations": "R",
  "not_in_cluster_mode": "R",
  "overloaded": "F",
  "shutting_down": "F",
  "timed_out": "F",
  "unreachable": "F",
  "cluster_unavailable": "F",
  "not_caught_up": "F",
  "cluster_diverged": "F",
  "invalid_endpoint_name": "V",
  "invalid_secret": "V",
  "endpoint_exists": "B",
  "endpoint_not_found": "B",
  "invalid_endpoint_url": "V",
  "too_many_endpoints": "B",
  "invalid_subscriber_name": "R",
  "subscriber_not_found": "R",
  "subscriber_exists_with_different_config": "R",
  "too_many_subscribers": "R",
  "start_positions_are_mutually_exclusive": "R",
  "seq_beyond_head": "R",
  "seq_not_delivered": "R",
  "seq_not_in_flight": "R",
  "dead_letter_not_found": "R",
  "backup_destination_exists": "R",
  "backup_destination_invalid": "R",
  "unauthenticated": "R",
  "forbidden": "R",
});

/** What a refused call carries besides its code. */
export interface ErrorDetails {
  /** The HTTP status of the reply (0 when no reply came). */
  status?: number;
  /** The idempotency key of the write, to retry it with (writes only). */
  key?: string | undefined;
  /** Whether the server answered from its inbox (a stored outcome). */
  replayed?: boolean;
  /** The reply body, as JSON, when there was one. */
  reply?: Record<string, unknown> | undefined;
  /** What caused it (a network error, an abort, the last failure). */
  cause?: unknown;
}

/** Any error of a tally call: `code` is the wire code (e.g. `exceeds_credits`). */
export class TallyError extends Error {
  readonly code: string;
  readonly codeClass: CodeClass;
  readonly status: number;
  readonly key: string | undefined;
  readonly replayed: boolean;
  readonly reply: Record<string, unknown> | undefined;

  constructor(code: string, message: string, details: ErrorDetails = {}) {
    super(message ? `${code}: ${message}` : code, details.cause !== undefined ? { cause: details.cause } : undefined);
    this.name = new.target.name;
    this.code = code;
    this.codeClass = codeClass(code, details.status ?? 0);
    this.status = details.status ?? 0;
    this.key = details.key;
    this.replayed = details.replayed ?? false;
    this.reply = details.reply;
  }
}

/** Class B: a business rejection (`exceeds_credits`, `stale`, `exists`, ...), stored and replayed. */
export class BusinessRejection extends TallyError {}

/** Class V: an invalid command (`amount_must_not_be_zero`, ...): not stored, fix it and resend with the same key. */
export class InvalidCommand extends TallyError {}

/** Class R: a refused request (`malformed_request`, `unknown_field`, `unauthenticated`, ...): not stored. */
export class RefusedRequest extends TallyError {}

/** `idempotency_key_reused` (409): the key already decided another request; nothing changed. Use a new key. */
export class IdempotencyKeyReused extends RefusedRequest {}

/** Class F: a fault (`overloaded`, `io_error`, ...) or no answer (`unreachable`, `timed_out`): not stored, retry with the same key. */
export class Fault extends TallyError {}

/**
 * The client's retries ran past their total deadline. `code` is the last
 * failure's (`unreachable` when no server answered, `timed_out` when an
 * attempt got no reply in time, else the server's, e.g. `overloaded`);
 * `last` is that failure and `attempts` how many were made. A write may
 * still have been applied: send it again with `key` and the same fields
 * to learn its outcome.
 */
export class DeadlineExceeded extends Fault {
  readonly last: TallyError;
  readonly attempts: number;

  constructor(last: TallyError, attempts: number) {
    const { status, key, replayed, reply } = last;
    super(last.code, `deadline passed after ${attempts} attempt(s): ${last.message}`, { status, key, replayed, reply, cause: last });
    this.last = last;
    this.attempts = attempts;
  }
}

/**
 * The class of `code`: the table's, else (a code newer than this client)
 * by the HTTP status: 422 B, other 4xx R, anything else F.
 */
export function codeClass(code: string, status: number): CodeClass {
  const known = CODE_CLASSES[code];
  if (known !== undefined) return known;
  if (status === 422) return "B";
  if (status >= 400 && status < 500) return "R";
  return "F";
}

/** The error object for a reply whose code is not `ok`. */
export function errorFor(code: string, message: string, details: ErrorDetails = {}): TallyError {
  if (code === "idempotency_key_reused") return new IdempotencyKeyReused(code, message, details);
  switch (codeClass(code, details.status ?? 0)) {
    case "B":
      return new BusinessRejection(code, message, details);
    case "V":
      return new InvalidCommand(code, message, details);
    case "R":
      return new RefusedRequest(code, message, details);
    default:
      return new Fault(code, message, details);
  }
}
