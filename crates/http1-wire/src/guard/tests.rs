use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::Waker;

use bytes::Bytes;

use super::*;

/// Frames given one per poll; `end` says whether the body knows it is over after the last.
struct Frames {
    frames: VecDeque<Result<&'static str, &'static str>>,
    end: bool,
}

impl Body for Frames {
    type Data = Bytes;
    type Error = &'static str;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
        Poll::Ready(
            self.frames
                .pop_front()
                .map(|f| f.map(|d| Frame::data(Bytes::from_static(d.as_bytes())))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.end && self.frames.is_empty()
    }
}

/// A body of `frames` with a guard that records how it ended.
fn guarded(
    frames: &[Result<&'static str, &'static str>],
    end: bool,
) -> (GuardedBody<Frames, impl Guard>, Rc<RefCell<Vec<End>>>) {
    let ends = Rc::new(RefCell::new(Vec::new()));
    let seen = ends.clone();
    let body = Frames {
        frames: frames.iter().copied().collect(),
        end,
    };
    (
        GuardedBody::new(body, move |e| seen.borrow_mut().push(e)),
        ends,
    )
}

fn poll<B: Body + Unpin>(b: &mut B) -> Option<Result<Frame<B::Data>, B::Error>> {
    match Pin::new(b).poll_frame(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(f) => f,
        Poll::Pending => panic!("pending"),
    }
}

#[test]
fn a_body_read_to_its_end_completes_the_guard_once() {
    let (mut b, ends) = guarded(&[Ok("a"), Ok("b")], false);
    assert!(poll(&mut b).is_some());
    assert!(ends.borrow().is_empty());
    assert!(poll(&mut b).is_some());
    assert!(poll(&mut b).is_none());
    assert!(poll(&mut b).is_none());
    drop(b);
    assert_eq!(*ends.borrow(), [End::Complete]);
}

#[test]
fn the_last_frame_of_a_body_that_knows_its_end_completes_the_guard() {
    let (mut b, ends) = guarded(&[Ok("a")], true);
    assert!(poll(&mut b).is_some());
    assert_eq!(*ends.borrow(), [End::Complete]);
    drop(b);
    assert_eq!(ends.borrow().len(), 1);
}

#[test]
fn an_error_fails_the_guard() {
    let (mut b, ends) = guarded(&[Ok("a"), Err("broken")], false);
    assert!(poll(&mut b).unwrap().is_ok());
    assert_eq!(poll(&mut b).unwrap().unwrap_err(), "broken");
    drop(b);
    assert_eq!(*ends.borrow(), [End::Failed]);
}

#[test]
fn a_body_dropped_before_its_end_drops_the_guard() {
    let (mut b, ends) = guarded(&[Ok("a"), Ok("b")], true);
    assert!(poll(&mut b).is_some());
    drop(b);
    assert_eq!(*ends.borrow(), [End::Dropped]);
}

#[test]
fn a_body_dropped_at_its_end_or_empty_from_the_start_completes_the_guard() {
    let (b, ends) = guarded(&[], true);
    assert!(b.is_end_stream());
    drop(b);
    assert_eq!(*ends.borrow(), [End::Complete]);
}

#[test]
fn no_guard_passes_the_body_through() {
    let mut b = GuardedBody::new(
        Frames {
            frames: [Ok("a")].into(),
            end: true,
        },
        None::<fn(End)>,
    );
    assert_eq!(b.size_hint().exact(), None);
    assert!(poll(&mut b).is_some());
    assert!(b.is_end_stream());
}
