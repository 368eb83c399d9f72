export { Producer, type ProducerOptions, type ProducerTransaction, type AfterCommit } from './producer.js';
