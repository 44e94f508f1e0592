/*
 * @tally/client — TypeScript client of tally's JSON API, for Node 18+ and
 * browsers, on `fetch` alone (README.md beside this folder).
 */
export { TallyClient, encodeJson } from "./client.js";
export type { ClientOptions, RetryOptions, CallOptions, WriteOptions, ReadOptions } from "./client.js";
export {
  TallyError,
  BusinessRejection,
  InvalidCommand,
  RefusedRequest,
  IdempotencyKeyReused,
  Fault,
  DeadlineExceeded,
  CODE_CLASSES,
  codeClass,
  errorFor,
} from "./errors.js";
export type { CodeClass, ErrorDetails } from "./errors.js";
export { uuidv7, newId, isUuidv7, transferIdFromKey } from "./ids.js";
export { SseParser } from "./sse.js";
export type { TailOptions, SseMessage } from "./sse.js";
export { runSubscriber, exactlyOnce, Park, Retry } from "./subscriber.js";
export type { Handler, SubscriberOptions, RunCounters, ExactlyOnceStore, Outcome } from "./subscriber.js";
export * from "./types.js";
