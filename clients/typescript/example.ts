// A small typed client of a few operations, written against the generated
// types (openapi.d.ts): `npm run check` compiles it with tsc --strict, so a
// change of openapi.yaml that breaks these uses fails the check.
import type { components, operations } from "./openapi";

export type Room = components["schemas"]["Room"];
export type RoomCreate = components["schemas"]["RoomCreate"];
export type Problem = components["schemas"]["Problem"];
export type MessageInput = components["schemas"]["MessageInput"];
export type PublishedMessage = components["schemas"]["PublishedMessage"];
export type PulledMessages = components["schemas"]["PulledMessages"];
type PublishHeaders = NonNullable<operations["publishMessage"]["parameters"]["header"]>;

/** An answer that is not 2xx, with its problem document. */
export class ProblemError extends Error {
  constructor(readonly problem: Problem) {
    super(`${problem.status} ${problem.title} (${problem.code})${problem.detail ? `: ${problem.detail}` : ""}`);
  }
}

/** Whether err is a problem of the kind code (say, a setup script taking already_exists as done). */
export function isProblem(err: unknown, code: Problem["code"]): boolean {
  return err instanceof ProblemError && err.problem.code === code;
}

/** Calls the API at base with the API key key. */
export class MessagingClient {
  constructor(private readonly base: string, private readonly key: string) {}

  private async call<T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
    const init: RequestInit = {
      method,
      headers: { Authorization: `Bearer ${this.key}`, ...(body === undefined ? {} : { "Content-Type": "application/json" }), ...headers },
    };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
    }
    const res = await fetch(this.base + path, init);
    if (!res.ok) {
      throw new ProblemError((await res.json()) as Problem);
    }
    return (await res.json()) as T;
  }

  createRoom(room: RoomCreate): Promise<Room> {
    return this.call<Room>("POST", "/v1/rooms", room);
  }

  publish(roomId: string, message: MessageInput, headers: PublishHeaders = {}): Promise<PublishedMessage> {
    const h: Record<string, string> = {};
    if (headers["Idempotency-Key"] !== undefined) {
      h["Idempotency-Key"] = headers["Idempotency-Key"];
    }
    return this.call<PublishedMessage>("POST", `/v1/rooms/${encodeURIComponent(roomId)}/messages`, message, h);
  }

  pull(roomId: string, subscriptionId: string, maxMessages: number, waitMs: number): Promise<PulledMessages> {
    const path = `/v1/rooms/${encodeURIComponent(roomId)}/subscriptions/${subscriptionId}/pull`;
    return this.call<PulledMessages>("POST", path, { maxMessages, waitMs });
  }
}

// What the types must accept and refuse: tsc fails when an expected error
// does not happen, so each line below is checked both ways.
export const orders: RoomCreate = { identifier: "orders", managerIdentifier: "team-a", messageExpiration: null };
export const created: MessageInput = { eventType: "order.created", payload: { orderId: "o-1" }, attributes: { region: "eu" } };
// @ts-expect-error a room needs its identifier
export const noIdentifier: RoomCreate = { managerIdentifier: "team-a" };
// @ts-expect-error deliveryAttempts is a number
export const badAttempts: RoomCreate = { identifier: "orders", deliveryAttempts: "3" };
// @ts-expect-error a problem's code is one of the spec's codes
export const noSuchCode: Problem["code"] = "no_such_code";
// @ts-expect-error status of a new room can only be ACTIVE
export const terminated: RoomCreate = { identifier: "orders", status: "TERMINATED" };

export function retryPolicyOf(room: Room): string {
  // retryPolicy is nullable: strict null checks make the null case explicit.
  return room.retryPolicy === null ? "exponential backoff" : `four phases (${room.retryPolicy.retryBackoffFunction ?? "linear"})`;
}
