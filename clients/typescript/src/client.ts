/*
 * client.ts — TallyClient: every op of tally's JSON API over `fetch`
 * (docs/PROTOCOL.md "JSON API"), with safe retries.
 *
 * Writes carry an idempotency key: the caller's (`key`) or a UUIDv7 made
 * per call. Every retry of that call sends the same key, so a write whose
 * reply was lost is answered from tallyd's inbox (`replayed: true`) and
 * never applied twice; the key is in the result and in every error, for
 * the caller to retry later. Retries happen on what is not stored (faults:
 * no reply, `overloaded`, `shutting_down`, `storage_full`, `io_error`, 502,
 * 503, 504), after a backoff (doubling, jittered, at least `Retry-After`),
 * until a total deadline; anything else (`ok`, a business rejection, a
 * refused request) is the answer.
 */

import { DeadlineExceeded, Fault, TallyError, errorFor } from "./errors.js";
import { transferIdFromKey, uuidv7 } from "./ids.js";
import { tailEvents, type TailOptions } from "./sse.js";
import { toBigInt } from "./types.js";
import type {
  Account,
  AccountOpen,
  AccountPage,
  AccountQueryPage,
  AccountTransfersFilter,
  AckResult,
  BatchMember,
  BatchResult,
  ChainResult,
  ClusterStatus,
  DeadLetterPage,
  Entitlement,
  EventDocument,
  ExtendRequest,
  FetchOptions,
  FetchResult,
  GrantRequest,
  HistoryPage,
  Balance,
  BalancePage,
  BalancesFilter,
  Id128,
  Int,
  IntInput,
  LogPage,
  PostRequest,
  ProgressResult,
  QueryFilter,
  ReverseRequest,
  RevokeRequest,
  Stats,
  SubCreateOptions,
  SubSettings,
  SubCreateResult,
  SubscriberInfo,
  Transfer,
  TransferPage,
  TransferRequest,
  TransferResult,
  VoidRequest,
  WriteOp,
  WriteResult,
} from "./types.js";

/** How a call retries what was not stored. */
export interface RetryOptions {
  /** Give up after this long in all, attempts and waits together (default 30000 ms). */
  deadlineMs?: number;
  /** The first wait (default 50 ms); each next one doubles, jittered. */
  initialDelayMs?: number;
  /** The longest wait between two attempts (default 2000 ms). */
  maxDelayMs?: number;
}

export interface ClientOptions {
  /** tallyd's HTTP face (default http://127.0.0.1:7452). */
  baseUrl?: string;
  /** The bearer token, when tallyd runs with --auth. */
  token?: string;
  /** The writes' namespace of keys (`Tally-Consumer`; tallyd's default is `http`). */
  consumer?: string;
  /** One attempt's bound beyond its own wait (default 10000 ms; long polls add their wait_ms). */
  attemptTimeoutMs?: number;
  retry?: RetryOptions;
  /** The fetch to use (default globalThis.fetch). */
  fetch?: typeof fetch;
}

/** Per call. */
export interface CallOptions {
  signal?: AbortSignal;
  /** This call's total deadline, instead of the client's. */
  deadlineMs?: number;
}

export interface WriteOptions extends CallOptions {
  /** The idempotency key (default: a new UUIDv7). Reuse it to retry the same write. */
  key?: string;
  /** The key's namespace, instead of the client's. */
  consumer?: string;
  /** Copied into the events (0-64 bytes). */
  correlation?: string;
}

export interface ReadOptions extends CallOptions {
  /**
   * Read-your-writes: the server answers once it has applied this
   * position — a write result's `cluster_seq` in cluster mode, its `seq`
   * (the log's head) on a single node. Sent as `min_seq` only when given.
   */
  minSeq?: IntInput;
}

interface Attempt {
  method: "GET" | "POST";
  path: string;
  query?: Record<string, IntInput | boolean | string | undefined>;
  body?: Record<string, unknown>;
  headers?: Record<string, string>;
  /** The key of a write, for its errors. */
  key?: string;
  /** How long the server may wait before answering (long polls). */
  waitMs?: number;
  /** The body of the next attempt after `failure`, when it should differ (else undefined). */
  onRetry?: (failure: TallyError) => Record<string, unknown> | undefined;
}

interface Reply {
  status: number;
  body: Record<string, unknown>;
}

/** Codes of faults that stored nothing and may pass: worth another attempt. */
const RETRY_CODES = new Set([
  "overloaded",
  "shutting_down",
  "storage_full",
  "io_error",
  "timed_out",
  "unreachable",
  "not_caught_up", // a read's min_seq not reached yet on this node (cluster mode)
  "cluster_unavailable", // JetStream did not take the write: nothing applied
]);
const RETRY_STATUSES = new Set([502, 503, 504]);

/** Whether a failure stored nothing and may pass: worth another attempt with the same key. */
function retryable(failure: TallyError): boolean {
  return RETRY_CODES.has(failure.code) || RETRY_STATUSES.has(failure.status);
}

/** JSON with bigints as decimal strings (the value rule). */
export function encodeJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v));
}

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new Error("aborted");
}

/** Wait `ms`, or less when `signal` aborts (then throw its reason). */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(abortError(signal!));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** `Retry-After` (seconds or an HTTP date) in ms, or 0. */
function retryAfterMs(value: string | null): number {
  if (value === null) return 0;
  const s = Number(value);
  if (Number.isFinite(s)) return Math.max(0, s * 1000);
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : 0;
}

/** A read's reply, or null when the entity does not exist (`not_found`). */
async function orNull(reply: Promise<Record<string, unknown>>): Promise<Record<string, unknown> | null> {
  try {
    return await reply;
  } catch (e) {
    if (e instanceof TallyError && e.code === "not_found") return null;
    throw e;
  }
}

export class TallyClient {
  readonly baseUrl: string;
  readonly consumer: string | undefined;
  private readonly token: string | undefined;
  private readonly fetchImpl: typeof fetch;
  private readonly attemptTimeoutMs: number;
  private readonly retry: Required<RetryOptions>;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? "http://127.0.0.1:7452").replace(/\/+$/, "");
    this.token = options.token;
    this.consumer = options.consumer;
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.attemptTimeoutMs = options.attemptTimeoutMs ?? 10000;
    this.retry = {
      deadlineMs: options.retry?.deadlineMs ?? 30000,
      initialDelayMs: options.retry?.initialDelayMs ?? 50,
      maxDelayMs: options.retry?.maxDelayMs ?? 2000,
    };
  }

  /** A new idempotency key (UUIDv7 text), to pass as `key` to a write and again to its retries. */
  newKey(): string {
    return uuidv7();
  }

  // ---- the transport: one call, its attempts, its retries ----

  private url(path: string, query?: Attempt["query"]): string {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) params.append(k, String(v));
    const q = params.toString();
    return `${this.baseUrl}${path}${q ? `?${q}` : ""}`;
  }

  /** Headers every request carries (the token). */
  authHeaders(): Record<string, string> {
    return this.token !== undefined ? { Authorization: `Bearer ${this.token}` } : {};
  }

  /** One attempt: the reply, or a thrown Fault (`unreachable`, `timed_out`) when none came. */
  private async attempt(a: Attempt, signal: AbortSignal | undefined, remainingMs: number): Promise<{ reply: Reply; retryAfter: number }> {
    const controller = new AbortController();
    // An attempt's bound, cut to what is left of the call's deadline (but
    // never below a long poll's own wait).
    const wait = a.waitMs ?? 0;
    let bound = this.attemptTimeoutMs + wait;
    if (remainingMs > 0) bound = Math.min(bound, Math.max(remainingMs, wait + 100));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, bound);
    const onAbort = (): void => controller.abort();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const headers: Record<string, string> = { Accept: "application/json", ...this.authHeaders(), ...a.headers };
      const init: RequestInit = { method: a.method, headers, signal: controller.signal };
      if (a.method === "POST") {
        headers["Content-Type"] = "application/json";
        init.body = encodeJson(a.body ?? {});
      }
      const res = await this.fetchImpl(this.url(a.path, a.query), init);
      const text = await res.text();
      let body: Record<string, unknown>;
      try {
        const parsed: unknown = JSON.parse(text);
        body = parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : {};
      } catch {
        body = {}; // a proxy's page, or the listener's plain-text refusals
      }
      if (typeof body.code !== "string") {
        body = { code: res.status >= 500 ? "unreachable" : "malformed_request", message: `HTTP ${res.status}: ${text.slice(0, 200)}` };
      }
      return { reply: { status: res.status, body }, retryAfter: retryAfterMs(res.headers.get("Retry-After")) };
    } catch (e) {
      if (signal?.aborted) throw abortError(signal);
      const code = timedOut ? "timed_out" : "unreachable";
      const what = timedOut ? `no reply within ${bound} ms` : `no reply from ${this.baseUrl}`;
      throw new Fault(code, what, { key: a.key, cause: e });
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /**
   * The call: attempts until an answer that is not a passing fault, or the
   * deadline (then DeadlineExceeded). Returns the body of an `ok` reply;
   * throws the error class of any other code (with the key of a write).
   */
  private async call(first: Attempt, o: CallOptions = {}): Promise<Record<string, unknown>> {
    const deadline = Date.now() + (o.deadlineMs ?? this.retry.deadlineMs);
    let a = first;
    let wait = this.retry.initialDelayMs;
    for (let attempts = 1; ; attempts++) {
      let failure: TallyError;
      let retryAfter = 0;
      try {
        const { reply, retryAfter: after } = await this.attempt(a, o.signal, deadline - Date.now());
        const code = reply.body.code as string;
        if (code === "ok") return reply.body;
        retryAfter = after;
        failure = errorFor(code, typeof reply.body.message === "string" ? reply.body.message : "", {
          status: reply.status,
          key: a.key,
          replayed: reply.body.replayed === true,
          reply: reply.body,
        });
      } catch (e) {
        if (!(e instanceof Fault)) throw e; // the caller's abort
        failure = e;
      }
      if (!retryable(failure)) throw failure;
      // A fault stored nothing: the same key again is safe. Jittered
      // doubling, at least what the server asked for, within the deadline.
      const pause = Math.max(retryAfter, wait / 2 + Math.random() * (wait / 2));
      if (Date.now() + pause >= deadline) throw new DeadlineExceeded(failure, attempts);
      await delay(pause, o.signal);
      wait = Math.min(wait * 2, this.retry.maxDelayMs);
      const body = a.onRetry?.(failure);
      if (body !== undefined) a = { ...a, body };
    }
  }

  // ---- writes ----

  private async write<R extends WriteResult>(op: string, fields: object, o: WriteOptions = {}): Promise<R> {
    const key = o.key ?? uuidv7();
    const consumer = o.consumer ?? this.consumer;
    const headers: Record<string, string> = { "Idempotency-Key": key };
    if (consumer !== undefined) headers["Tally-Consumer"] = consumer;
    const body: Record<string, unknown> = { ...fields };
    if (o.correlation !== undefined) body.correlation = o.correlation;
    const reply = await this.call({ method: "POST", path: `/v1/${op}`, body, headers, key }, o);
    return reply as unknown as R;
  }

  /** Open an account. */
  accountOpen(account: AccountOpen, o?: WriteOptions): Promise<WriteResult> {
    return this.write("account_open", account, o);
  }

  /**
   * Move `amount` from the debit account to the credit account, or hold it
   * (`flags: 1`, see `hold`). Without `id`, tallyd derives one from the
   * consumer and the key; the result's `transfer_id` is the transfer's id
   * either way.
   */
  async transfer(t: TransferRequest, o: WriteOptions = {}): Promise<TransferResult> {
    const key = o.key ?? uuidv7();
    const transfer_id = t.id ?? (await transferIdFromKey(o.consumer ?? this.consumer ?? "http", key));
    const result = await this.write("transfer", t, { ...o, key });
    return { ...result, transfer_id };
  }

  /** A hold: a pending transfer (flags bit 0), expiring after `timeout_s` (0 or absent: never); `post` or `void` it by its `transfer_id`. */
  hold(t: TransferRequest, o?: WriteOptions): Promise<TransferResult> {
    return this.transfer({ ...t, flags: toBigInt(t.flags ?? 0) | 1n }, o);
  }

  /**
   * Reverse a posted transfer, all of what is not reversed yet or
   * `amount`: a new transfer the other way whose `reverses` names it
   * (docs/PROTOCOL.md "Reversals"). Without `id`, one is derived from the
   * consumer and the key, as for `transfer`; the result's `transfer_id` is
   * the reversal's id.
   */
  async transferReverse(r: ReverseRequest, o: WriteOptions = {}): Promise<TransferResult> {
    const key = o.key ?? uuidv7();
    const transfer_id = r.id ?? (await transferIdFromKey(o.consumer ?? this.consumer ?? "http", key));
    const result = await this.write("transfer_reverse", { ...r, id: transfer_id }, { ...o, key });
    return { ...result, transfer_id };
  }

  /** Post (capture) a hold, all of it or `amount`. */
  post(p: PostRequest, o?: WriteOptions): Promise<WriteResult> {
    return this.write("post", p, o);
  }

  /** Void a hold. */
  void(v: VoidRequest, o?: WriteOptions): Promise<WriteResult> {
    return this.write("void", v, o);
  }

  /** Grant an entitlement (for life when neither `valid_until_ms` nor `duration_ms` is given). */
  grant(g: GrantRequest, o?: WriteOptions): Promise<WriteResult> {
    return this.write("grant", g, o);
  }

  /** Extend an active or expired entitlement to a later end. */
  extend(e: ExtendRequest, o?: WriteOptions): Promise<WriteResult> {
    return this.write("extend", e, o);
  }

  /** Revoke an entitlement. */
  revoke(r: RevokeRequest, o?: WriteOptions): Promise<WriteResult> {
    return this.write("revoke", r, o);
  }

  /** Apply write ops all or nothing under one key; a failure throws the failing member's code (`reply.codes`). */
  chain(ops: WriteOp[], o?: WriteOptions): Promise<ChainResult> {
    return this.write("chain", { ops }, o);
  }

  /**
   * Independent writes in one request, each with its own key (a member
   * without one gets one derived from the batch's key, so a retried batch
   * replays member by member). Members' codes are in `results`; only a
   * request refused as a whole throws.
   */
  async batch(ops: BatchMember[], o: WriteOptions = {}): Promise<BatchResult> {
    const key = o.key ?? uuidv7();
    const reply = await this.write<WriteResult>("batch", { ops }, { ...o, key });
    return { key, results: (reply as unknown as BatchResult).results };
  }

  // ---- reads ----

  private read(path: string, query: Attempt["query"], o: ReadOptions = {}, waitMs?: number): Promise<Record<string, unknown>> {
    const q = { ...query };
    if (o.minSeq !== undefined) q.min_seq = o.minSeq;
    return this.call({ method: "GET", path, query: q, waitMs }, o);
  }

  /** A read by POST /v1/<op>, for a path parameter a GET path cannot carry (one with `/`). */
  private readByPost(op: string, body: Record<string, unknown>, o: ReadOptions = {}): Promise<Record<string, unknown>> {
    const query: Attempt["query"] = {};
    if (o.minSeq !== undefined) query.min_seq = o.minSeq;
    return this.call({ method: "POST", path: `/v1/${op}`, body, query }, o);
  }

  /** An account with its balances, or null when there is none. */
  async accountGet(id: IntInput, o?: ReadOptions): Promise<Account | null> {
    const reply = await orNull(this.read(`/v1/accounts/${id}`, {}, o));
    return reply === null ? null : (reply.account as Account);
  }

  /** An account's balance-moving events, paged by seq. */
  async accountHistory(
    id: IntInput,
    page: { after_seq?: IntInput; limit?: number; reverse?: boolean } = {},
    o?: ReadOptions,
  ): Promise<HistoryPage> {
    return (await this.read(`/v1/accounts/${id}/history`, page, o)) as unknown as HistoryPage;
  }

  /** An account's balances after each transfer event in a time or seq range, paged (docs/PROTOCOL.md "Balances at a point in time"). */
  async accountBalances(account_id: IntInput, filter: BalancesFilter = {}, o?: ReadOptions): Promise<BalancePage> {
    return (await this.read(`/v1/accounts/${account_id}/balances`, { ...filter }, o)) as unknown as BalancePage;
  }

  /** An account's balances after every entry at or before `timestamp_ms` or `seq` (give one); seq 0 when none is that early. */
  async balanceAt(account_id: IntInput, at: { timestamp_ms?: IntInput; seq?: IntInput }, o?: ReadOptions): Promise<Balance> {
    return (await this.read(`/v1/accounts/${account_id}/balance_at`, { ...at }, o)).balance as Balance;
  }

  /** Accounts in id order, paged (`next` is the `after_id` of the next page). */
  async accountList(page: { after_id?: IntInput; limit?: number } = {}, o?: ReadOptions): Promise<AccountPage> {
    return (await this.read("/v1/accounts", page, o)) as unknown as AccountPage;
  }

  /** Accounts matching every filter given, in creation order, a page at a time (`next`: the `cursor` of the next page). */
  async accountQuery(filter: QueryFilter = {}, o?: ReadOptions): Promise<AccountQueryPage> {
    return (await this.readByPost("account_query", { ...filter }, o)) as unknown as AccountQueryPage;
  }

  /** Transfers matching every filter given, in creation order, a page at a time. */
  async transferQuery(filter: QueryFilter = {}, o?: ReadOptions): Promise<TransferPage> {
    return (await this.readByPost("transfer_query", { ...filter }, o)) as unknown as TransferPage;
  }

  /** The transfers that debit or credit an account (`debits`, `credits`: which), in creation order, paged. */
  async accountTransfers(account_id: IntInput, filter: AccountTransfersFilter = {}, o?: ReadOptions): Promise<TransferPage> {
    return (await this.readByPost("account_transfers", { account_id, ...filter }, o)) as unknown as TransferPage;
  }

  /** A transfer or hold, or null when there is none. */
  async transferGet(id: Id128, o?: ReadOptions): Promise<Transfer | null> {
    const reply = await orNull(this.read(`/v1/transfers/${encodeURIComponent(id)}`, {}, o));
    return reply === null ? null : (reply.transfer as Transfer);
  }

  /** One entitlement, its state evaluated now, or null when there is none. */
  async entitlementGet(subject: string, feature: string, o?: ReadOptions): Promise<Entitlement | null> {
    const reply = await orNull(
      subject.includes("/")
        ? this.readByPost("entitlement_get", { subject, feature }, o)
        : this.read(`/v1/entitlements/${encodeURIComponent(subject)}`, { feature }, o),
    );
    return reply === null ? null : (reply.entitlement as Entitlement);
  }

  /** A subject's entitlements. */
  async entitlementList(subject: string, o?: ReadOptions): Promise<Entitlement[]> {
    const reply = subject.includes("/")
      ? await this.readByPost("entitlement_list", { subject }, o)
      : await this.read(`/v1/entitlements/${encodeURIComponent(subject)}`, {}, o);
    return reply.entitlements as Entitlement[];
  }

  /** Whether `subject` has `feature` now: an entitlement in state `active`. */
  async hasEntitlement(subject: string, feature: string, o?: ReadOptions): Promise<boolean> {
    return (await this.entitlementGet(subject, feature, o))?.state === "active";
  }

  /**
   * Events from `from` (default 1), at most `limit`, waiting up to
   * `wait_ms` for one when there is none yet. A page may hold fewer than
   * `limit` though more exist: go on from the last seq + 1.
   */
  async logRead(q: { from?: IntInput; limit?: number; wait_ms?: number } = {}, o?: ReadOptions): Promise<LogPage> {
    return (await this.read("/v1/log", q, o, q.wait_ms)) as unknown as LogPage;
  }

  /** Head seq, counts, map use, subscribers. */
  async stats(o?: ReadOptions): Promise<Stats> {
    return (await this.read("/v1/stats", {}, o)) as unknown as Stats;
  }

  /** Cluster mode: this node's name, stream, applied position and lag; a single node throws RefusedRequest `not_in_cluster_mode`. */
  async cluster(o?: ReadOptions): Promise<ClusterStatus> {
    return (await this.read("/v1/cluster", {}, o)) as unknown as ClusterStatus;
  }

  /**
   * The live event stream (GET /v1/events, Server-Sent Events): each
   * event once, in order, from `from` (default: only new events),
   * reconnecting with `Last-Event-ID` when the stream ends or breaks.
   * Stop it with `signal` or by leaving the `for await` loop.
   */
  events(options: TailOptions = {}): AsyncGenerator<EventDocument, void, undefined> {
    return tailEvents(
      {
        baseUrl: this.baseUrl,
        fetch: this.fetchImpl,
        headers: () => this.authHeaders(),
        head: async (signal) => (await this.stats({ signal })).head_seq,
      },
      options,
    );
  }

  // ---- durable subscribers (docs/SUBSCRIBERS.md) ----

  private subWrite(op: string, body: Record<string, unknown>, o?: CallOptions, waitMs?: number): Promise<Record<string, unknown>> {
    return this.call({ method: "POST", path: `/v1/${op}`, body, waitMs }, o);
  }

  /** Create a durable subscriber (an identical one existing: `created` false). */
  async subCreate(name: string, options: SubCreateOptions = {}, o?: CallOptions): Promise<SubCreateResult> {
    return (await this.subWrite("sub_create", { name, ...options }, o)) as unknown as SubCreateResult;
  }

  /** Change a subscriber's settings, keeping its cursor, in-flight events and dead letters. */
  async subUpdate(name: string, settings: SubSettings, o?: CallOptions): Promise<SubscriberInfo> {
    const reply = await this.subWrite("sub_update", { name, ...settings }, o);
    return reply.subscriber as SubscriberInfo;
  }

  /** A subscriber's metrics. */
  async subGet(name: string, o?: ReadOptions): Promise<SubscriberInfo> {
    const reply = name.includes("/")
      ? await this.readByPost("sub_get", { name }, o)
      : await this.read(`/v1/subscribers/${encodeURIComponent(name)}`, {}, o);
    return reply.subscriber as SubscriberInfo;
  }

  /** Every subscriber's metrics. */
  async subList(o?: ReadOptions): Promise<SubscriberInfo[]> {
    return (await this.read("/v1/subscribers", {}, o)).subscribers as SubscriberInfo[];
  }

  /** Delete a subscriber, its in-flight records and dead letters. */
  async subDelete(name: string, o?: CallOptions): Promise<boolean> {
    return (await this.subWrite("sub_delete", { name }, o)).deleted === true;
  }

  /**
   * Events to handle: replays, due redeliveries, then new events (at most
   * `max`, waiting `wait_ms`), leased to `instance`. A retry after a lost
   * reply is sent with `restart`, so that what the lost reply leased to
   * this instance is due again at once rather than after its ack wait.
   */
  async subFetch(name: string, f: FetchOptions = {}, o?: CallOptions): Promise<FetchResult> {
    const body = { name, ...f };
    const onRetry = (failure: TallyError): Record<string, unknown> | undefined =>
      failure.status === 0 && f.instance !== undefined ? { ...body, restart: true } : undefined;
    const reply = await this.call({ method: "POST", path: "/v1/sub_fetch", body, waitMs: f.wait_ms, onRetry }, o);
    return reply as unknown as FetchResult;
  }

  /** Acknowledge: every event up to `seq`, and/or the seqs in `done`. */
  async subAck(name: string, a: { seq?: IntInput; done?: IntInput[] }, o?: CallOptions): Promise<AckResult> {
    return (await this.subWrite("sub_ack", { name, ...a }, o)) as unknown as AckResult;
  }

  /**
   * Still at work on in-flight events: their lease (the subscriber's ack
   * wait) starts again, so they are not due to another fetch yet
   * (docs/SUBSCRIBERS.md). `instance`: only what it holds. Events acked,
   * parked or held by another instance are skipped (`extended` counts the
   * others).
   */
  async subProgress(name: string, seqs: IntInput[], instance?: string, o?: CallOptions): Promise<ProgressResult> {
    const body: Record<string, unknown> = { name, seqs };
    if (instance !== undefined) body.instance = instance;
    return (await this.subWrite("sub_progress", body, o)) as unknown as ProgressResult;
  }

  /** Deliver an in-flight event again later (after `delay_ms`, or the backoff rule). */
  async subNak(name: string, seq: IntInput, n: { delay_ms?: number; reason?: string; error?: string } = {}, o?: CallOptions): Promise<{ attempt: number; deliver_after_ms: Int }> {
    return (await this.subWrite("sub_nak", { name, seq, ...n }, o)) as unknown as { attempt: number; deliver_after_ms: Int };
  }

  /** Move an in-flight event to the dead-letter queue. */
  async subPark(name: string, seq: IntInput, reason?: string, o?: CallOptions): Promise<{ ack_floor: Int }> {
    const body: Record<string, unknown> = { name, seq };
    if (reason !== undefined) body.reason = reason;
    return (await this.subWrite("sub_park", body, o)) as unknown as { ack_floor: Int };
  }

  /** A subscriber's dead letters, paged by seq. */
  async dlqList(name: string, page: { after_seq?: IntInput; limit?: number } = {}, o?: ReadOptions): Promise<DeadLetterPage> {
    const reply = name.includes("/")
      ? await this.readByPost("dlq_list", { name, ...page }, o)
      : await this.read(`/v1/subscribers/${encodeURIComponent(name)}/dead_letters`, page, o);
    return reply as unknown as DeadLetterPage;
  }

  /** Deliver a dead letter (`seq`) or all of them again. */
  async dlqReplay(name: string, seq?: IntInput, o?: CallOptions): Promise<{ replaying: Int }> {
    const body: Record<string, unknown> = { name };
    if (seq !== undefined) body.seq = seq;
    return (await this.subWrite("dlq_replay", body, o)) as unknown as { replaying: Int };
  }

  /** Remove a dead letter. */
  async dlqDiscard(name: string, seq: IntInput, o?: CallOptions): Promise<boolean> {
    return (await this.subWrite("dlq_discard", { name, seq }, o)).discarded === true;
  }

  // ---- tally-relay's endpoints (docs/RELAY.md, "Endpoint state in tallyd") ----

  /** Disable the endpoint: the relays deliver nothing to it until enabled. */
  endpointDisable(endpoint: string, reason?: string, o?: WriteOptions): Promise<WriteResult> {
    return this.write("endpoint_disable", reason === undefined ? { endpoint } : { endpoint, reason }, o);
  }

  /** Enable a disabled endpoint again. */
  endpointEnable(endpoint: string, o?: WriteOptions): Promise<WriteResult> {
    return this.write("endpoint_enable", { endpoint }, o);
  }

  /** A new signing secret; the one before it signs too for overlap_s (default a day). */
  endpointRotateSecret(endpoint: string, secret: string, overlap_s?: number, o?: WriteOptions): Promise<WriteResult> {
    return this.write("endpoint_rotate_secret", overlap_s === undefined ? { endpoint, secret } : { endpoint, secret, overlap_s }, o);
  }

  /** Have the relays resend every event committed since since_ms. */
  endpointRecover(endpoint: string, since_ms: number, o?: WriteOptions): Promise<WriteResult> {
    return this.write("endpoint_recover", { endpoint, since_ms }, o);
  }

  /** A relay's word that the recover asked at recover_version is done. */
  endpointRecovered(endpoint: string, recover_version: number, o?: WriteOptions): Promise<WriteResult> {
    return this.write("endpoint_recovered", { endpoint, recover_version }, o);
  }

  /** Define an endpoint in tallyd: every relay starts delivering to it (docs/RELAY.md). */
  endpointCreate(
    endpoint: string,
    url: string,
    secret: string,
    settings: { types?: string; retry_schedule?: string; connect_timeout_ms?: number; timeout_ms?: number; backfill?: string } = {},
    o?: WriteOptions,
  ): Promise<WriteResult> {
    return this.write("endpoint_create", { endpoint, url, secret, ...settings }, o);
  }

  /** Change an endpoint defined in tallyd (the settings given). */
  endpointUpdate(
    endpoint: string,
    settings: { url?: string; types?: string; retry_schedule?: string; connect_timeout_ms?: number; timeout_ms?: number },
    o?: WriteOptions,
  ): Promise<WriteResult> {
    return this.write("endpoint_update", { endpoint, ...settings }, o);
  }

  /** Remove an endpoint defined in tallyd: the relays stop delivering to it. */
  endpointDelete(endpoint: string, o?: WriteOptions): Promise<WriteResult> {
    return this.write("endpoint_delete", { endpoint }, o);
  }

  /** The endpoints defined in tallyd, in name order (no secrets). */
  async endpointList(o?: ReadOptions): Promise<Record<string, unknown>[]> {
    const reply = await this.readByPost("endpoint_list", {}, o);
    return (reply.endpoints as Record<string, unknown>[] | undefined) ?? [];
  }

  /** The endpoint's state: state, version, changed_ms, reason, ... */
  endpointGet(endpoint: string, o?: ReadOptions): Promise<Record<string, unknown>> {
    return this.readByPost("endpoint_get", { endpoint }, o);
  }

  /** The endpoint's signing secrets as tallyd holds them (admin). */
  endpointSecretGet(endpoint: string, o?: ReadOptions): Promise<Record<string, unknown>> {
    return this.readByPost("endpoint_secret_get", { endpoint }, o);
  }

  /** The endpoint's delivery attempts, newest first (the attempt log). */
  async endpointAttempts(endpoint: string, seq?: number, limit?: number, o?: ReadOptions): Promise<Record<string, unknown>[]> {
    const body: Record<string, unknown> = { endpoint };
    if (seq !== undefined) body.seq = seq;
    if (limit !== undefined) body.limit = limit;
    return ((await this.readByPost("endpoint_attempts", body, o)).attempts ?? []) as Record<string, unknown>[];
  }

  /** Record delivery attempts in the attempt log (what tally-relay does). */
  endpointAttemptsRecord(endpoint: string, attempts: Record<string, unknown>[], retention_s?: number, o?: CallOptions): Promise<Record<string, unknown>> {
    return this.subWrite("endpoint_attempts_record", retention_s === undefined ? { endpoint, attempts } : { endpoint, attempts, retention_s }, o);
  }

}
