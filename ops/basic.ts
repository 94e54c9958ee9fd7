/**
 * The plain data every op rule takes: shapes and attribute values. Its own module so that
 * algebra.ts and grad.ts (which types.ts builds OpDef from) depend on it, not on types.ts:
 * the ops folder has no import cycle. Op files import these through types.ts.
 */

export type Shape = readonly number[];
export type AttrValue = null | boolean | number | string | AttrValue[] | { [k: string]: AttrValue };
export type Attrs = Readonly<Record<string, AttrValue>>;
