/** Types of a plan file as written (after schema validation). See plan-v1.schema.json. */
import type { AttrValue } from '../ops/types.js';

type RawExpr = { expr: string };
export type RawInt = number | RawExpr;
export type RawRange = [RawInt, RawInt];
export type RawDimIndex = '*' | RawRange | RawRange[];
type RawValue = [RawInt, number] | [RawInt, number, 'sum' | 'avg' | 'max' | 'min'] | { chunk: RawInt; of: number; reduce?: 'sum' | 'max' | 'min'; divisor?: number; split?: string };
export type RawLineage = ({ logical: string; index?: RawDimIndex[]; value?: RawValue } | { logical: string; placements: string[] }) & { inferred?: boolean };
export type RawSelector = 'all' | number[] | { where: Record<string, number | number[]> };
export type RawGroup = RawInt[] | { ranks: RawInt[] } | { axes: string[] };
export type RawPeer = number | RawExpr | { shift: Record<string, number> };

export interface RawLogicalTensor {
  id: string;
  shape: number[];
  role: 'input' | 'param' | 'optimizer_state' | 'activation' | 'grad' | 'output';
  dtype?: string;
  values?: { range: [number, number]; also?: number[] };
  loc?: string;
}
export interface RawOp {
  id: string;
  op: string;
  inputs: string[];
  outputs: string[];
  attrs?: Record<string, AttrValue>;
  loc?: string;
}
export interface RawParallelOp extends RawOp {
  group?: RawGroup;
  peer?: RawPeer;
  microbatch?: number;
}
export interface RawParallelTensor {
  id: string;
  shape: RawInt[];
  dtype?: string;
  lineage?: RawLineage;
  loc?: string;
}
export interface RawProgram {
  name?: string;
  ranks: RawSelector;
  tensors?: RawParallelTensor[];
  ops: RawParallelOp[];
}
export type RawIo = string[] | Record<string, string[]>;
export interface RawCollective {
  id: string;
  op: string;
  attrs?: Record<string, AttrValue>;
  group?: RawGroup;
  ranks?: RawSelector;
  src?: number;
  dst?: number;
  inputs: RawIo;
  outputs: RawIo;
  microbatch?: number;
  loc?: string;
}
// A type literal, not an interface: a plan is a plain JSON object, and code that handles any
// JSON object (Record<string, unknown>) takes it as one.
export type RawPlan = {
  format: 'planproof/v1';
  name?: string;
  description?: string;
  mesh: { axes: { name: string; size: number }[]; ranks?: number[] };
  logical: { tensors: RawLogicalTensor[]; ops: RawOp[] };
  parallel: { programs: RawProgram[]; collectives?: RawCollective[] };
  contract: { inputs: string[]; outputs: string[] };
  /** Extensions the format ignores (the generator's `x-planproof-gen`, say): the schema allows any `x-` key. */
  [extension: `x-${string}`]: unknown;
};
