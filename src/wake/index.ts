export { WakeChannel, type WakeChannelOptions, type PublishCounters } from './wake-channel.js';
export { LocalWakeRoute, type LocalWakeTarget, type DirectReservation } from './local-route.js';
export { WakeStreams, MAX_IDS_PER_ENTRY, type WakeEntry, type WakeMessage, type WakeKind } from './channel.js';
export { ControlStreams, type ControlMessage, type ControlEntry } from './control.js';
export { WakeTimers, type WakeTimer, type RecurringSchedule, type TimerHandlers } from './timers.js';
export { wakeStreamKey, controlStreamKey, CONSUMER_GROUP, DEFAULT_KEY_PREFIX } from './keys.js';
export type { RedisTarget } from './redis.js';
