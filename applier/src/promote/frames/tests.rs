//! Unit tests of the frame header checks every walk and copy makes ([`inspect_frame`](super::inspect_frame)).

use super::*;

#[test]
fn restamp_header_rewrites_only_the_epoch_field_and_says_whether_it_changed() {
    let mut header = [0xABu8; RECORD_BATCH_OVERHEAD];
    header[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4].copy_from_slice(&7i32.to_be_bytes());
    let before = header;
    assert!(restamp_header(&mut header, 3));
    assert_eq!(
        &header[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4],
        &3i32.to_be_bytes()
    );
    assert_eq!(
        header[..PARTITION_LEADER_EPOCH_OFFSET],
        before[..PARTITION_LEADER_EPOCH_OFFSET]
    );
    assert_eq!(
        header[PARTITION_LEADER_EPOCH_OFFSET + 4..],
        before[PARTITION_LEADER_EPOCH_OFFSET + 4..]
    );
    assert!(!restamp_header(&mut header, 3), "the same epoch again changes nothing");
    let mut short = [1u8; PARTITION_LEADER_EPOCH_OFFSET + 2];
    assert!(!restamp_header(&mut short, 3));
    assert_eq!(short, [1u8; PARTITION_LEADER_EPOCH_OFFSET + 2]);
}
