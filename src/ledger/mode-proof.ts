import {
  OperationNodeTransformer,
  RawNode,
  ValueListNode,
  ValueNode,
  type KyselyPlugin,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type PrimitiveValueListNode,
  type QueryExecutorProvider,
  type QueryResult,
  type RootOperationNode,
  type UnknownRow,
} from 'kysely';
import { format } from 'mysql2';
import { literal } from './sql/common/fragments.js';

// Values in SQL text that no sql_mode can misread (sql/common/fragments.ts, `literal`),
// on connections the ledger does not set up itself.

/**
 * Every string value of a statement written into its text by `literal`
 * before the driver sees it. Kysely's MySQL dialect hands bound values to
 * mysql2's `query`, which does not send them apart from the text: it
 * escapes them into it with backslashes, and on a session whose sql_mode
 * has NO_BACKSLASH_ESCAPES a quote in the value then ends the literal. The
 * ledger's own pool turns that mode off; a caller's connection may have it
 * on. Other values stay parameters: numbers, Dates and Buffers come out of
 * mysql2's escaping without a backslash.
 */
class StringsAsLiterals extends OperationNodeTransformer {
  protected override transformValue(node: ValueNode): ValueNode {
    return typeof node.value === 'string' ? (RawNode.createWithSql(literal(node.value)) as unknown as ValueNode) : node;
  }

  protected override transformPrimitiveValueList(node: PrimitiveValueListNode): PrimitiveValueListNode {
    if (!node.values.some((v) => typeof v === 'string')) return node;
    const values = node.values.map((v) =>
      typeof v === 'string' ? RawNode.createWithSql(literal(v)) : ValueNode.create(v),
    );
    return ValueListNode.create(values) as unknown as PrimitiveValueListNode;
  }
}

const STRINGS_AS_LITERALS = new StringsAsLiterals();

/** The plugin of a Kysely (or transaction) the ledger was handed: see StringsAsLiterals. */
export const MODE_PROOF_VALUES: KyselyPlugin = {
  transformQuery: (args: PluginTransformQueryArgs): RootOperationNode =>
    STRINGS_AS_LITERALS.transformNode(args.node, args.queryId),
  transformResult: (args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> => Promise.resolve(args.result),
};

/** A caller's executor (their transaction), on the same connection, its statements' strings written by `literal`. */
export function modeProof(exec: QueryExecutorProvider): QueryExecutorProvider {
  return { getExecutor: () => exec.getExecutor().withPlugin(MODE_PROOF_VALUES) };
}

/**
 * The ledger's pool's `queryFormat`: the values of a statement sent as text
 * written into it, strings by `literal` (mode-proof, as on a caller's
 * connection), the rest as mysql2 writes them (Dates in `timeZone`). With
 * no values the text goes out as it is: mysql2 would scan it for
 * placeholders anyway, and a thousand-row INSERT of inlined literals spent
 * more time there than in building it.
 */
export function formatValues(timeZone: string): (text: string, values: unknown) => string {
  return (text, values) =>
    Array.isArray(values) && values.length > 0
      ? format(
          text,
          values.map((v: unknown) => (typeof v === 'string' ? { toSqlString: () => literal(v) } : v)) as Parameters<
            typeof format
          >[1],
          false,
          timeZone,
        )
      : text;
}
