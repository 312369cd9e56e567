// An intrusive first-in first-out list of operation records (linked through
// their `next` member): moving records between lists never allocates.
#pragma once

namespace deepwell::detail {

template <class Record>
class op_fifo {
 public:
  bool empty() const { return head_ == nullptr; }
  Record* front() const { return head_; }

  void push_back(Record* r) {
    r->next = nullptr;
    if (tail_)
      tail_->next = r;
    else
      head_ = r;
    tail_ = r;
  }

  Record* pop_front() {
    Record* r = head_;
    if (r) {
      head_ = r->next;
      if (!head_) tail_ = nullptr;
      r->next = nullptr;
    }
    return r;
  }

  // Appends all of `other` to this list, leaving `other` empty.
  void splice_back(op_fifo& other) {
    if (other.empty()) return;
    if (tail_)
      tail_->next = other.head_;
    else
      head_ = other.head_;
    tail_ = other.tail_;
    other.head_ = other.tail_ = nullptr;
  }

 private:
  Record* head_ = nullptr;
  Record* tail_ = nullptr;
};

}  // namespace deepwell::detail
