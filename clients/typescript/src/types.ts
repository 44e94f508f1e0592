/*
 * types.ts — the shapes of tally's JSON API (docs/PROTOCOL.md "JSON API",
 * docs/openapi.json): requests by their wire field names, replies as tallyd
 * sends them. docs/EVENTS.md names every field of accounts, transfers and
 * entitlements.
 *
 * The value rule: integers are JSON numbers up to 2^53 and decimal strings
 * beyond it (in replies), so an integer of a reply is an `Int`
 * (number | string; `toBigInt` reads either). A request takes numbers,
 * bigints or decimal strings (`IntInput`). 16-byte ids are 32 hex digits.
 */

/** An integer of a reply: a number, or a decimal string beyond ±2^53. */
export type Int = number | string;

/** An integer of a request: a number, a bigint or a decimal string. */
export type IntInput = number | bigint | string;

/** A 16-byte id: 32 hex digits (a request may use the UUID form with dashes). */
export type Id128 = string;

/** An `Int` as a bigint, exactly. */
export function toBigInt(v: Int | bigint): bigint {
  return typeof v === "bigint" ? v : BigInt(v);
}

/** An account's flags (`AccountOpen.flags`, `Account.flags`). */
export const AccountFlags = Object.freeze({
  /** bit 0: its debits (pending and posted) may not pass its credits posted */
  debits_must_not_exceed_credits: 1,
  /** bit 1: its credits may not pass its debits posted */
  credits_must_not_exceed_debits: 2,
  /** bit 2: closed by a closing transfer (set by tallyd only; `account_open` refuses it) */
  closed: 4,
  /** bit 3: imported history, opened at `timestamp_ms` (docs/PROTOCOL.md "Imported history") */
  imported: 8,
});

/** A transfer's flags (`TransferRequest.flags`, `Transfer.flags`; docs/PROTOCOL.md "Balancing and closing transfers"). */
export const TransferFlags = Object.freeze({
  /** bit 0: a hold, to `post` or `void` */
  pending: 1,
  /** bit 1: move at most what the debit account has (its credits posted less its debits) */
  balancing_debit: 2,
  /** bit 2: move at most what the credit account may take (its debits posted less its credits) */
  balancing_credit: 4,
  /** bit 3, with pending: close the debit account while the hold is pending or once posted */
  closing_debit: 8,
  /** bit 4, with pending: close the credit account likewise */
  closing_credit: 16,
  /** bit 5: imported history, created at `timestamp_ms` (docs/PROTOCOL.md "Imported history") */
  imported: 32,
});

/**
 * The caller's own values on an account or transfer, set when it is made
 * and never changed (0, or 32 zeros: none); `accountQuery`,
 * `transferQuery` and `accountTransfers` filter by them.
 */
export interface UserData {
  /** 32 hex digits (an invoice, a customer) */
  user_data_128: Id128;
  user_data_64: Int;
  user_data_32: number;
}

/** The user data of a write, each optional (default 0: none). */
export interface UserDataInput {
  /** 32 hex digits, or the UUID form with dashes */
  user_data_128?: Id128;
  user_data_64?: IntInput;
  user_data_32?: IntInput;
}

export interface Account extends UserData {
  id: Int;
  ledger: number;
  code: number;
  /** AccountFlags */
  flags: number;
  debits_posted: Int;
  credits_posted: Int;
  debits_pending: Int;
  credits_pending: Int;
  version: Int;
  created_seq: Int;
  created_ms: Int;
}

/** `pending`, `posted`, `pending_posted`, `pending_voided`, `pending_expired`. */
export type TransferState = string;

/** What a transfer is, in a read and in an event document alike. */
export interface TransferBase {
  id: Id128;
  debit_account_id: Int;
  credit_account_id: Int;
  amount: Int;
  ledger: number;
  code: number;
  /** TransferFlags */
  flags: number;
  state: TransferState;
  timeout_s: number;
  posted_amount: Int;
  version: Int;
  created_seq: Int;
  resolved_seq: Int;
}

/** A transfer as reads give it (`transferGet`, history entries, queries). */
export interface Transfer extends TransferBase, UserData {
  expires_at_ms: Int;
  created_ms: Int;
  /** The transfer this one reverses (`transferReverse`); 32 zeros when none. */
  reverses: Id128;
  /** How much of this transfer its reversals moved back so far. */
  reversed_amount: Int;
}

/** `active`, `expired`, `revoked` (evaluated at the server's now). */
export type EntitlementState = string;

export interface Entitlement {
  subject: string;
  feature: string;
  state: EntitlementState;
  valid_until_ms: Int;
  version: Int;
  source_order: Int;
  granted_ms: Int;
  updated_ms: Int;
  grant_transfer_id?: Id128 | null;
}

/** An account as an event document carries it (docs/PROTOCOL.md, "The event document"). */
export interface EventAccount extends Omit<Account, keyof UserData | "created_ms">, Partial<UserData> {
  debits_must_not_exceed_credits: boolean;
  credits_must_not_exceed_debits: boolean;
}

/** A transfer as an event document carries it: times as RFC 3339 text. */
export interface EventTransfer extends TransferBase, Partial<UserData> {
  /** The transfer it reverses, when it is a reversal. */
  reverses?: Id128;
  reversed_amount?: Int;
  pending: boolean;
  /** RFC 3339; null when unset */
  expires_at: string | null;
  /** RFC 3339 */
  created: string | null;
}

/** An entitlement as an event document carries it. */
export interface EventEntitlement {
  subject: string;
  feature: string;
  state: EntitlementState;
  lifetime: boolean;
  /** RFC 3339 and Unix ms; null for a lifetime entitlement */
  valid_until: string | null;
  valid_until_ms: Int | null;
  version: Int;
  /** null when none was given */
  source_order: Int | null;
  granted: string;
  updated: string;
}

/**
 * One event as its JSON document (docs/PROTOCOL.md "The event document",
 * the same one tally-relay sends): the header, and under `data` the
 * objects right after the change.
 */
export interface EventDocument {
  seq: Int;
  /** The event's id, UUID text: the same on every delivery of the event. */
  event_id: string;
  /** `account.opened`, `transfer.created`, `transfer.posted`, `entitlement.granted`, ... (docs/EVENTS.md) */
  type: string;
  entity_kind: string;
  /** `{kind, id}` (accounts, transfers), `{kind, subject, feature}` (entitlements), ... */
  entity: { kind: string; [k: string]: unknown };
  entity_version: Int;
  /** RFC 3339 UTC */
  time: string;
  time_ms: Int;
  /** What caused it; null for events of the expiry sweep. */
  consumer: string | null;
  key: string | null;
  data: {
    account?: EventAccount;
    transfer?: EventTransfer;
    debit_account?: EventAccount;
    credit_account?: EventAccount;
    entitlement?: EventEntitlement;
    /** `source`, `event_id`, `event_type`, `signed_at_s`, and `payload` or `body_base64` */
    webhook?: Record<string, unknown>;
    /** `subscriber`, `seq`, `attempts`, `parked_ms`, `error` */
    dead_letter?: Record<string, unknown>;
    /** tally-relay's endpoint: `name`, `state`, `reason`, `previous_secret_until_ms`, `recover_since_ms` */
    endpoint?: Record<string, unknown>;
  };
}

// ---- writes ----

export interface AccountOpen extends UserDataInput {
  id: IntInput;
  ledger: IntInput;
  code: IntInput;
  /** AccountFlags: bit 0 debits_must_not_exceed_credits, bit 1 credits_must_not_exceed_debits, bit 3 imported */
  flags?: IntInput;
  /** imported only: its original creation time, Unix ms */
  timestamp_ms?: IntInput;
}

export interface TransferRequest extends UserDataInput {
  /** Left out: tallyd derives it from the consumer and key (the result carries it). */
  id?: Id128;
  debit_account_id: IntInput;
  credit_account_id: IntInput;
  amount: IntInput;
  ledger: IntInput;
  code: IntInput;
  /** TransferFlags: bit 0 pending (a hold), 1 balancing_debit, 2 balancing_credit, 3 closing_debit, 4 closing_credit */
  flags?: IntInput;
  /** holds: expire after this many seconds (0 = never) */
  timeout_s?: IntInput;
  /** imported only (flags bit 5): its original creation time, Unix ms */
  timestamp_ms?: IntInput;
}

/** Reverse a posted transfer, all or part of it (docs/PROTOCOL.md "Reversals"). */
export interface ReverseRequest extends UserDataInput {
  /** The reversal's own id. Left out: derived from the consumer and key, as for `transfer`. */
  id?: Id128;
  /** The posted transfer to reverse. */
  reverses: Id128;
  /** Left out: all that is not reversed yet. */
  amount?: IntInput;
  /** Left out: the reversed transfer's code. */
  code?: IntInput;
}

export interface PostRequest {
  pending_id: Id128;
  /** Left out: all of the hold. */
  amount?: IntInput;
}

export interface VoidRequest {
  pending_id: Id128;
}

export interface GrantRequest {
  subject: string;
  feature: string;
  valid_until_ms?: IntInput;
  duration_ms?: IntInput;
  source_order?: IntInput;
  grant_transfer_id?: Id128;
}

export interface ExtendRequest {
  subject: string;
  feature: string;
  valid_until_ms?: IntInput;
  duration_ms?: IntInput;
  source_order?: IntInput;
}

export interface RevokeRequest {
  subject: string;
  feature: string;
  source_order?: IntInput;
}

/** A member of a `chain` (no key) or of a `batch` (its own key, or one derived from the batch's). */
export type WriteOp =
  | ({ op: "account_open" } & AccountOpen)
  | ({ op: "transfer"; id: Id128 } & Omit<TransferRequest, "id">)
  | ({ op: "post" } & PostRequest)
  | ({ op: "void" } & VoidRequest)
  | ({ op: "grant" } & GrantRequest)
  | ({ op: "extend" } & ExtendRequest)
  | ({ op: "revoke" } & RevokeRequest);

export type BatchMember = WriteOp & { key?: string; correlation?: string };

/** The reply to a write that was applied, or replayed from the inbox. */
export interface WriteResult {
  code: "ok";
  /** Answered from the inbox: an earlier call with this key applied it. */
  replayed: boolean;
  /** The seq of the first event it caused (reads with `minSeq` wait for it). */
  seq: Int | null;
  /** How many events it caused. */
  events: number;
  /** The idempotency key: call again with it to retry safely. */
  key: string;
  /** Cluster mode: the command stream position it was applied at (a read's `minSeq` waits for it). */
  cluster_seq?: Int;
}

/** The reply to a transfer or hold, with its id (given, or derived from the consumer and key). */
export interface TransferResult extends WriteResult {
  transfer_id: Id128;
}

export interface ChainResult extends WriteResult {
  codes: string[] | null;
  failed_index: number | null;
}

/** One member's result in a batch: `code` may be any code (the batch itself is `ok`). */
export interface BatchMemberResult {
  code: string;
  replayed: boolean;
  seq: Int | null;
  events: number;
  key: string;
  original_seq?: Int | null;
}

export interface BatchResult {
  key: string;
  results: BatchMemberResult[];
}

// ---- reads ----

export interface HistoryEntry {
  seq: Int;
  type: string;
  time_ms: Int;
  transfer: Transfer;
  account: Account;
}

export interface HistoryPage {
  entries: HistoryEntry[];
  next: Int | null;
}

export interface AccountPage {
  entries: Account[];
  next: Int | null;
}

/**
 * The filters of `accountQuery` and `transferQuery`: each one given
 * (and not 0) must match; records in creation order (`reversed`: newest
 * first), `limit` (1-1000, default 100) a page, `cursor` the `next` of the
 * page before (with the same filters).
 */
export interface QueryFilter {
  ledger?: IntInput;
  code?: IntInput;
  user_data_128?: Id128;
  user_data_64?: IntInput;
  user_data_32?: IntInput;
  /** created at or after this Unix ms */
  timestamp_min_ms?: IntInput;
  /** created at or before this Unix ms */
  timestamp_max_ms?: IntInput;
  limit?: number;
  reversed?: boolean;
  cursor?: Id128;
}

/** The filters of `accountTransfers`: those of a query but the ledger, and which side. */
export interface AccountTransfersFilter extends Omit<QueryFilter, "ledger"> {
  /** transfers that debit the account (default true) */
  debits?: boolean;
  /** transfers that credit the account (default true) */
  credits?: boolean;
}

/** A page of `accountQuery`: `next` is the `cursor` of the next page, null at the end. */
export interface AccountQueryPage {
  entries: Account[];
  next: Id128 | null;
}

/** An account's balances right after one transfer event of its history (`accountBalances`, `balanceAt`). */
export interface Balance {
  seq: Int;
  /** the transfer's creation time (an imported one's own), else the event's commit time */
  timestamp_ms: Int;
  debits_pending: Int;
  debits_posted: Int;
  credits_pending: Int;
  credits_posted: Int;
}

/** The range of `accountBalances`: inclusive bounds (absent: none), `after_seq` the `next` of the page before. */
export type BalancesFilter = {
  timestamp_min_ms?: IntInput;
  timestamp_max_ms?: IntInput;
  seq_min?: IntInput;
  seq_max?: IntInput;
  limit?: number;
  reversed?: boolean;
  after_seq?: IntInput;
};

/** A page of `accountBalances`: `next` is the `after_seq` of the next page, null at the end. */
export interface BalancePage {
  balances: Balance[];
  next: Int | null;
}

/** A page of `transferQuery` or `accountTransfers`. */
export interface TransferPage {
  entries: Transfer[];
  next: Id128 | null;
}

export interface LogPage {
  head: Int;
  events: EventDocument[];
  log_floor: Int;
  log_floor_hash: string;
}

export interface Stats {
  head_seq: Int;
  first_seq: Int;
  accounts: Int;
  transfers: Int;
  entitlements: Int;
  inbox: Int;
  events: Int;
  subscribers: SubscriberInfo[];
  [k: string]: unknown;
}

/** Cluster mode: this node and how far it has applied the command stream (docs/CLUSTER.md). */
export interface ClusterStatus {
  node: string;
  stream: string;
  /** the command stream position this node has applied */
  position: Int;
  /** the stream's last seq as this node last saw it */
  stream_last_seq: Int;
  lag_messages: Int;
  /** the last checkpoint this node compared (0: none yet) */
  checkpoint_position?: Int;
  /** the nodes whose state digest there is this node's, and those heard */
  checkpoint_agreeing?: Int;
  checkpoint_nodes?: Int;
  /** this node stopped serving (diverged_why says why) */
  diverged?: boolean;
  diverged_why?: string;
  [k: string]: unknown;
}

// ---- durable subscribers (docs/SUBSCRIBERS.md) ----

export interface SubscriberInfo {
  name: string;
  ack_floor: Int;
  delivered_seq: Int;
  pending: Int;
  in_flight: Int;
  dead_letters: Int;
  max_deliver: number;
  ack_wait_ms: number;
  backoff_ms: number[];
  max_ack_pending: number;
  /** ordered partitions, present for a subscriber with some (docs/SUBSCRIBERS.md) */
  partitions?: number;
  /** each partition's live holder (null: free) and the end of its lease */
  partition_holders?: { partition: number; holder: string | null; lease_until_ms: number }[];
  [k: string]: unknown;
}

/** A subscriber's settings: what `sub_create` takes and `sub_update` changes
 * (docs/SUBSCRIBERS.md; `""` or 0 clears one in an update). */
export interface SubSettings {
  max_deliver?: number;
  ack_wait_ms?: number;
  backoff_ms?: number[];
  max_ack_pending?: number;
  /** event types, comma-separated */
  filter_types?: string;
  /** entity kinds, comma-separated */
  filter_kinds?: string;
  /** a glob over an entitlement event's subject */
  filter_subject?: string;
  inactive_expiry_ms?: number;
  /** who owns its dead letters */
  contact?: string;
  /** where their alerts go */
  alert_route?: string;
}

export interface SubCreateOptions extends SubSettings {
  /** `beginning` (default) or `now` */
  start?: "beginning" | "now";
  from_seq?: IntInput;
  from_time_ms?: IntInput;
  /** 2-64: events spread by entity over ordered partitions, each held by one instance */
  partitions?: number;
}

export interface SubCreateResult {
  created: boolean;
  subscriber: SubscriberInfo;
}

export interface FetchOptions {
  max?: number;
  wait_ms?: number;
  restart?: boolean;
  instance?: string;
}

/** One event handed to a durable subscriber. */
export interface Delivery {
  seq: Int;
  /** The how-many-th delivery of this event (1 the first time). */
  attempt: number;
  /** Delivered again by `dlq_replay`. */
  replay: boolean;
  event: EventDocument;
}

export interface FetchResult {
  events: Delivery[];
  ack_floor: Int;
  head: Int;
}

/** What `subProgress` did: how many leases started again, and until when. */
export interface ProgressResult {
  extended: Int;
  /** Unix ms: the new end of their lease */
  deliver_after_ms: Int;
}

export interface AckResult {
  ack_floor: Int;
  acked: Int;
}

export interface DeadLetter {
  seq: Int;
  attempts: number;
  error: string;
  parked_ms: Int;
  replaying: boolean;
  event_id: string;
  type: string;
}

export interface DeadLetterPage {
  entries: DeadLetter[];
  next: Int | null;
}
