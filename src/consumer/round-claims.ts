import type { ClaimInput } from '../ledger/inputs.js';
import type { ClaimedItem, ClaimOutcome, QueueClass } from '../ledger/types.js';
import type { CoalesceClaim } from './coalescing.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { ConsumerSettings } from './options.js';

/**
 * The ledger's side of one claim round (docs/design/consumer.md): the claim
 * limiter's look at the fleet, the claim of ids named by wake-ups, and the
 * search for other heads by the consumer's preferred-class tiers. The
 * scheduler decides when and how much; this says how it is asked.
 */
export class RoundClaims {
  /** The classes of each head search's claims, in order: one tier of every class unless classes are preferred. */
  private readonly classTiers: QueueClass[][];
  private readonly fixed: Omit<ClaimInput, 'limit' | 'classes' | 'maxProcessing'>;

  constructor(
    private readonly ledger: ConsumerLedger,
    private readonly settings: ConsumerSettings,
    owner: string,
    coalesce: CoalesceClaim | undefined,
  ) {
    const s = settings;
    this.classTiers = classTiers(s.classes, s.preferClasses);
    this.fixed = {
      queue: s.queue,
      owner,
      leaseMs: s.leaseMs,
      ...(s.epoch !== undefined ? { epoch: s.epoch } : {}),
      ...(coalesce !== undefined ? { coalesce } : {}),
      ...(s.types ? { types: s.types } : {}),
    };
  }

  /** What every claim of the consumer names; the fleet cap as set now (Consumer.retune changes it live). */
  private get base(): Omit<ClaimInput, 'limit' | 'classes'> {
    const cap = this.settings.maxProcessing;
    return cap === undefined ? this.fixed : { ...this.fixed, maxProcessing: cap };
  }

  /**
   * The claim limiter: how many more the fleet cap lets the queue process.
   * The ledger holds the cap in each claim's own transaction; this count
   * only spares a round its claims when the fleet is at the cap already.
   */
  async capRoom(cap: number): Promise<number> {
    return cap - (await this.ledger.countProcessing(this.settings.queue));
  }

  /** Claims the named items that are still claimable heads (stale-only: of those, the rescued ones). */
  byIds(ids: string[], staleOnly = false): Promise<ClaimedItem[]> {
    return ids.length > 0
      ? this.ledger.claimByIds({ ...this.base, ids, ...(staleOnly ? { staleOnly } : {}) })
      : Promise.resolve([]);
  }

  /**
   * A head search, by the consumer's preferred-class tiers when it has some
   * (docs/design/consumer.md, "Executor pools"): each tier's classes first, the
   * next tier only for the room the earlier ones left.
   */
  async heads(want: number, staleOnly = false): Promise<ClaimOutcome> {
    const items: ClaimedItem[] = [];
    let moreAvailable = false;
    for (const classes of this.classTiers) {
      const r = await this.ledger.claim({
        ...this.base,
        limit: want - items.length,
        classes,
        ...(staleOnly ? { staleOnly } : {}),
      });
      items.push(...r.items);
      moreAvailable ||= r.moreAvailable;
      if (items.length >= want) break;
    }
    return { items, moreAvailable };
  }
}

/** Each preferred class (of the consumer's) a tier of its own, in order, then the rest together. */
function classTiers(classes: readonly QueueClass[], prefer: readonly QueueClass[] | undefined): QueueClass[][] {
  if (prefer === undefined) return [[...classes]];
  const first = prefer.filter((c) => classes.includes(c));
  const rest = classes.filter((c) => !first.includes(c));
  return [...first.map((c) => [c]), ...(rest.length > 0 ? [rest] : [])];
}
